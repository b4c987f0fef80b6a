"""Shared plumbing of the model backends (hhem, nli, embedding): device, dtype, long evidence, batched scoring.

A backend subclasses :class:`ModelVerifier` and implements ``encode(pairs) -> (rows, owners)`` and
``forward(batch) -> Tensor[rows]``; :meth:`ModelVerifier.score` does the rest, in this order:

1. deduplicate, trim to ``evidence_top_k`` sentences if set, look up the cache (:class:`PairPipeline`);
2. **long evidence** (:meth:`ModelVerifier.evidence_windows`): an evidence whose pair would pass
   ``max_row_tokens`` model tokens is cut into overlapping windows of the model's tokens, each of which
   fits beside the prompt and the claim (``long_evidence: chunks``, the default), or first cut to the
   claim's top-k sentences and then windowed (``long_evidence: top_k``). Each window becomes a pair of
   its own; the original pair scores as its best-supporting window (:func:`best_row_scores`), as
   factual-consistency checkers (SummaC, AlignScore, MiniCheck) score long documents. Memory per row is
   then bounded by ``max_row_tokens`` whatever the evidence's length (T5's eager attention keeps several
   ``heads x L x L`` fp32 tensors per row); the cost is more rows: about ``E / (0.75 W)`` windows of
   ``W`` tokens for an evidence of ``E`` tokens, each repeating the prompt and the claim;
3. ``encode`` the windowed pairs, run ``forward`` in token-budget micro-batches
   (:func:`~fspo.verifiers.batching.run_batched`; a backend with quadratic attention memory also
   bounds ``rows x width^2`` by ``max_attention_cells``), and take each pair's best row.

A new backend gets the windowing by construction: it only has to encode the pairs it is given. One
whose rows are already bounded (``embedding`` embeds sentences) sets ``windows_evidence = False``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from abc import abstractmethod
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import torch

from fspo.config.environment import environment_value
from fspo.config.vocabulary import GPU_DTYPES, LONG_EVIDENCE
from fspo.cpu.compute import FLOAT32, compute_dtype_choice
from fspo.verifiers.base import Pair, PairPipeline
from fspo.verifiers.batching import (
    Features,
    pad_features,
    plan_micro_batches,
    run_batched,
)
from fspo.verifiers.text import top_k_evidence

# Activation memory a colocated verifier may take per micro-batch beside vLLM and the actor on one GPU
# (benchmarks/recipe_memory.py budgets the same 1.5 GB).
VERIFIER_ACTIVATION_BYTES = 1.5e9

# Concurrent requests merged into one model call hold at most this many micro-batches' token budget: enough
# rows to sort by length and fill micro-batches, while a request waits behind ~4 micro-batches, not a step.
MERGED_MICRO_BATCHES = 4
# Characters per model token assumed when sizing a merged call before tokenizing (English subwords: ~4).
CHARS_PER_TOKEN = 4

# Evidences whose token boundaries a server keeps (LRU, stored as two int32 arrays: ~8 bytes per token, so
# ~8 MB for 1,024 evidences of 1k tokens). Every rollout of a prompt (8 at the paper's scale) brings the same
# evidence, mostly in different merged calls; 1,024 covers the 128 prompts of ~8 steps, all a step reuses.
EVIDENCE_SPANS_CACHED = 1024

# long_evidence=top_k with evidence_top_k unset: sentences kept from an evidence past max_row_tokens.
LONG_EVIDENCE_TOP_K = 5

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

logger = logging.getLogger(__name__)


def _ray_assigned_no_gpu() -> bool:
    """True inside a Ray process that Ray gave no GPU (e.g. verl's reward workers)."""
    ray = sys.modules.get("ray")  # not imported -> not a Ray process
    if ray is None or not ray.is_initialized():
        return False
    try:
        return not ray.get_gpu_ids()
    except Exception:  # noqa: BLE001 - an odd Ray state: fall back to torch's view
        return False


# Set (to 1/true) node-wide, Ray no longer narrows CUDA_VISIBLE_DEVICES to an actor's GPUs.
NOSET_CUDA_VISIBLE_DEVICES = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def ray_cuda_index(ray_gpu_ids: Sequence[str], cuda_visible_devices: str | None) -> int | None:
    """The torch CUDA index of the first GPU Ray assigned, in a process whose ``CUDA_VISIBLE_DEVICES`` Ray did
    not narrow: Ray's ids name the node's GPUs as listed in the raylet's ``CUDA_VISIBLE_DEVICES`` (or all of
    them by number when unset), which this process sees too. ``None`` when Ray assigned none, or its id is
    not among the visible devices."""
    if not ray_gpu_ids:
        return None
    first = str(ray_gpu_ids[0])
    if cuda_visible_devices is None:
        return int(first) if first.isdigit() else None
    visible = [device.strip() for device in cuda_visible_devices.split(",") if device.strip()]
    return visible.index(first) if first in visible else None


def _noset_cuda_index() -> int | None:
    """:func:`ray_cuda_index` of this process when Ray leaves ``CUDA_VISIBLE_DEVICES`` alone, else ``None``."""
    ray = sys.modules.get("ray")
    if not environment_value(NOSET_CUDA_VISIBLE_DEVICES):
        return None
    if ray is None or not ray.is_initialized():
        return None
    return ray_cuda_index([str(i) for i in ray.get_gpu_ids()], os.environ.get("CUDA_VISIBLE_DEVICES"))


def resolve_device(device: str) -> torch.device:
    """``auto`` -> ``cuda`` when a GPU is visible and ours, else ``cpu``.

    Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES`` set in actors that requested no GPU, so in a Ray process
    without a GPU of its own ``auto`` means ``cpu``: a reward worker must not silently take GPU memory
    from vLLM (use ``placement: ray`` to give the verifier its own GPU). An explicit ``cuda`` is obeyed.
    With ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` every process sees every GPU, so ``auto`` is
    ``cuda:<index of the GPU Ray assigned>`` (:func:`ray_cuda_index`), not ``cuda:0`` for every server.
    """
    if device == "auto":
        usable = torch.cuda.is_available() and not _ray_assigned_no_gpu()
        if not usable:
            return torch.device("cpu")
        index = _noset_cuda_index()
        return torch.device("cuda" if index is None else f"cuda:{index}")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device | None = None, backend: str | None = None) -> torch.dtype:
    """The torch dtype a model backend computes in on ``device``; on CUDA, turns TF32 on where asked.

    ``None`` (``fspo.verifier.dtype: null``) is ``backend``'s GPU default on a CUDA device
    (:data:`fspo.config.vocabulary.GPU_DTYPES`) and float32 elsewhere. ``tf32`` keeps float32 weights and
    activations and, on CUDA only, lets cuBLAS round matmul inputs to TF32 (10-bit mantissa, float32
    accumulation); ``float32`` on CUDA sets IEEE float32 matmuls. torch's flag is process-wide, which is right
    for a verifier server's own process (``colocated``, ``ray``) and, in a process that also runs other float32
    models on CUDA, applies to them too (``fspo evaluate``'s transformers generator sets IEEE float32 around its
    own generation). On a CPU without bf16 instructions half precision runs through torch's slow reference
    kernels (:mod:`fspo.cpu.compute`), several times slower than float32: there ``bfloat16``/``float16``
    compute in float32, with a warning.
    """
    cuda = device is not None and device.type == "cuda"
    if dtype is None:
        dtype = GPU_DTYPES.get(backend, "float32") if cuda else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if cuda and DTYPES[dtype] == torch.float32:  # an explicit float32 turns TF32 off again
        torch.backends.cuda.matmul.fp32_precision = "tf32" if dtype == "tf32" else "ieee"
    if device is not None and device.type == "cpu" and DTYPES[dtype] != torch.float32:
        choice = compute_dtype_choice()
        if choice.dtype == FLOAT32:
            logger.warning("fspo.verifier: dtype %s on this CPU (%s): computing in float32", dtype, choice.reason)
            return torch.float32
    return DTYPES[dtype]


def best_row_scores(owners: Sequence[int], values: Sequence[float], pairs: int) -> list[float]:
    """Each pair's score: the best of its rows' (a pair may span several rows, e.g. evidence chunks).

    A pair without rows (a fact checker's empty evidence) is unverifiable (NaN). A NaN row makes its pair NaN, never
    unsupported (``max(-inf, nan)`` is ``-inf`` in Python, a -1 label); a model's NaN never gets here, as
    :func:`~fspo.verifiers.batching.run_batched` fails its call.
    """
    scores = [float("-inf")] * pairs
    for owner, value in zip(owners, values):
        if math.isnan(value) or math.isnan(scores[owner]):
            scores[owner] = math.nan
        else:
            scores[owner] = max(scores[owner], value)
    return [math.nan if score == float("-inf") else score for score in scores]


def attention_cells(budget_bytes: float, heads: int, dtype: torch.dtype, tensors: int = 3) -> int:
    """How many ``L x L`` cells per head fit ``budget_bytes`` when eager attention keeps ``tensors``
    ``(rows, heads, L, L)`` tensors of ``dtype`` alive at once (T5: the position bias plus mask, the scores
    and their softmax, kept while a layer runs)."""
    return int(budget_bytes // (tensors * heads * torch.finfo(dtype).bits // 8))


def plan_windows(length: int, window: int, overlap: int) -> list[tuple[int, int]]:
    """Token windows ``[start, end)`` that cover ``range(length)``, each at most ``window`` long.

    Consecutive windows share ``overlap`` tokens (a sentence cut by one window's end is whole in the
    next); a sequence that fits is one window.
    """
    if window < 1 or not 0 <= overlap < window:
        raise ValueError(f"need window >= 1 and 0 <= overlap < window, got window={window}, overlap={overlap}")
    windows = [(0, min(length, window))]
    while windows[-1][1] < length:
        start = windows[-1][1] - overlap
        windows.append((start, min(length, start + window)))
    return windows


class ModelVerifier(PairPipeline):
    """A verifier whose pairs become tokenized rows scored by one model forward per micro-batch.

    Subclasses set ``self.model``, ``self.tokenizer`` and implement:
      - ``encode(pairs) -> (rows, owners)``: tokenized rows and, for each row, the index of its pair
        (a pair may give several rows, e.g. evidence chunks; its score is the best row's);
      - ``forward(batch) -> Tensor[rows]``: support probability of each padded row.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: model dtype name (``float32``, ``tf32``, ``bfloat16``, ``float16``); ``None``: the backend's
            GPU default on CUDA (``GPU_DTYPES``), float32 elsewhere (see :func:`resolve_dtype`).
        max_tokens_per_batch: padded-token budget of one micro-batch.
        max_row_tokens: the most model tokens one row (prompt + evidence + claim) may have; a longer
            evidence is cut into windows (see the module doc). ``0`` or ``None``: no limit (whole
            evidence, as in the paper; memory grows with the square of the longest evidence).
        long_evidence: ``chunks`` (every window of the evidence, best one counts) or ``top_k`` (the
            claim's ``evidence_top_k`` best sentences, 5 if unset, then windows if still too long).
        evidence_top_k, cache_size: see [`~fspo.verifiers.base.PairPipeline`].
    """

    # False for a backend whose rows never hold a whole evidence (embedding: one sentence per row).
    windows_evidence: bool = True
    # Most padded rows x width^2 in one micro-batch (None: the token budget alone); see attention_cells.
    max_attention_cells: int | None = None

    def __init__(
        self,
        *,
        device: str = "auto",
        dtype: str | None = None,
        max_tokens_per_batch: int = 16384,
        max_row_tokens: int | None = 512,
        long_evidence: str = "chunks",
        evidence_top_k: int | None = None,
        cache_size: int = 0,
    ):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        if long_evidence not in LONG_EVIDENCE:
            raise ValueError(f"long_evidence must be one of {LONG_EVIDENCE}, got {long_evidence!r}")
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device, self.name)
        self.max_tokens_per_batch = max_tokens_per_batch
        self.max_row_tokens = max_row_tokens or None
        self.long_evidence = long_evidence
        self._spans: OrderedDict[str, tuple[array, array]] = OrderedDict()
        self.spans_tokenized = 0  # evidences tokenized for their boundaries (cache misses)

    def merge_budget(self) -> float:
        """Model tokens merged into one call: ``MERGED_MICRO_BATCHES`` micro-batches' worth."""
        return MERGED_MICRO_BATCHES * self.max_tokens_per_batch

    def pair_cost(self, pair: Pair) -> float:
        """The model tokens a pair is expected to take, from its length in characters (not tokenized here:
        this runs on the server's event loop)."""
        return (len(pair[0]) + len(pair[1])) / CHARS_PER_TOKEN

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return 0 if pad is None else pad

    @abstractmethod
    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]: ...

    @abstractmethod
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def evidence_windows(self, pairs: Sequence[Pair]) -> tuple[list[Pair], list[int]]:
        """``pairs`` with every evidence too long for ``max_row_tokens`` cut into windows that fit.

        Returns the pairs to encode and, for each, the index of its pair in ``pairs``. A window is a
        slice of the evidence's text on the model's token boundaries; it fits beside the claim and the
        backend's prompt (measured by encoding the claim with an empty evidence), give or take a token
        at its edges. A claim that leaves less than a quarter of the row still gets a quarter.
        """
        pairs = list(pairs)
        if not self.windows_evidence or self.max_row_tokens is None or not pairs:
            return pairs, list(range(len(pairs)))
        least_budget = self.max_row_tokens // 4
        tokenized = {evidence: self._token_spans(evidence) for evidence in dict.fromkeys(e for e, _ in pairs)}
        # What the prompt and the claim take, measured only where the evidence may not fit beside them.
        claims = list(dict.fromkeys(claim for evidence, claim in pairs if len(tokenized[evidence][0]) > least_budget))
        overhead = dict.fromkeys(claims, 0)
        if claims:
            bare_rows, bare_owners = self.encode([("", claim) for claim in claims])
            for row, owner in zip(bare_rows, bare_owners):
                overhead[claims[owner]] = max(overhead[claims[owner]], len(row["input_ids"]))
        windowed, owners = [], []
        for index, (evidence, claim) in enumerate(pairs):
            starts, ends = tokenized[evidence]
            budget = max(self.max_row_tokens - overhead.get(claim, 0), least_budget)
            if len(starts) > budget and self.long_evidence == "top_k":
                evidence = top_k_evidence(evidence, claim, self.evidence_top_k or LONG_EVIDENCE_TOP_K)
                starts, ends = self._token_spans(evidence)
            if len(starts) <= budget:
                windowed.append((evidence, claim))
                owners.append(index)
                continue
            for start, end in plan_windows(len(starts), budget, budget // 4):
                windowed.append((evidence[starts[start] : ends[end - 1]], claim))
                owners.append(index)
        return windowed, owners

    def _token_spans(self, text: str) -> tuple[array, array]:
        """Character start and end of each of ``text``'s model tokens (no special tokens), remembered for the
        last ``EVIDENCE_SPANS_CACHED`` texts: the same evidence comes back with every rollout of its prompt."""
        cached = self._spans.get(text)
        if cached is not None:
            self._spans.move_to_end(text)
            return cached
        offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = array("i", (start for start, _ in offsets)), array("i", (end for _, end in offsets))
        self.spans_tokenized += 1
        self._spans[text] = spans
        if len(self._spans) > EVIDENCE_SPANS_CACHED:
            self._spans.popitem(last=False)
        return spans

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        windowed, window_owners = self.evidence_windows(pairs)
        rows, owners = self.encode(windowed)
        outputs = run_batched(
            rows,
            self.forward,
            pad_token_id=self.pad_token_id,
            device=self.device,
            max_tokens_per_batch=self.max_tokens_per_batch,
            max_attention_cells=self.max_attention_cells,
        )
        pair_of_row = [window_owners[owner] for owner in owners]
        return best_row_scores(pair_of_row, [float(value) for value in outputs], len(pairs))

    def micro_batches(self, pairs: Sequence[Pair]) -> list[dict[str, torch.Tensor]]:
        """The padded micro-batches [`score`] would run for ``pairs`` (deduplicated): for benchmarks."""
        rows, _ = self.encode(self.evidence_windows(list(dict.fromkeys(self.prepare(pairs))))[0])
        plan = plan_micro_batches(
            [len(r["input_ids"]) for r in rows], self.max_tokens_per_batch, self.max_attention_cells
        )
        return [pad_features([rows[i] for i in idx], self.pad_token_id, self.device) for idx in plan]
