"""HHEM-2.1-Open (``vectara/hallucination_evaluation_model``), the verifier of the FSPO paper.

How HHEM-2.1-Open scores a (premise, hypothesis) pair, as published:
  - the model is a ``T5ForTokenClassification`` (T5 encoder + 2-way token head) fine-tuned from
    ``google/flan-t5-base``, wrapped in remote code (``HHEMv2ForSequenceClassification``, attribute ``t5``);
  - the input is one string, ``config.prompt`` filled with ``text1`` = premise (evidence) and ``text2`` =
    hypothesis (claim): ``"<pad> Determine if the hypothesis is true given the premise?\\n\\nPremise:
    {text1}\\n\\nHypothesis: {text2}"``, tokenized by the flan-t5 tokenizer (``config.foundation``) with its
    special tokens (a trailing ``</s>``), no truncation (T5's relative positions take any length);
  - the score is ``softmax(logits[:, 0, :])[:, 1]``: the first token's (the literal ``<pad>``) class-1
    ("consistent") probability. Weights are published in float32.

Here the whole premise goes in one row, as Vectara's ``predict()`` (and the FSPO paper) score it, up to
``HHEM_MAX_ROW_TOKENS`` (3,072) tokens per row: T5's eager attention keeps three ``heads x L x L`` fp32
tensors per row while a layer runs (the position bias plus mask, the scores, their softmax), 144 bytes
per ``L^2`` for HHEM's 12 heads, and 3,072 is the longest row (in steps of 256) whose tensors fit the
verifier's 1.5 GB activation budget beside vLLM (``VERIFIER_ACTIVATION_BYTES``: 1.36 GB at 3,072; a
4,096-token row would take 2.4 GB). Micro-batches of long rows are bounded the same way
(``max_attention_cells``: one 3,072-token row, ten 1k-token rows). **Departure**: a row past the cap,
an evidence of more than about 3,000 tokens (~2,300 English words) beside a 25-token step, is cut into
overlapping windows and scores as its best window (``fspo.verifiers.model_base``); Vectara's code would
run it whole. ``max_row_tokens=0`` lifts the cap (memory then grows with the square of the longest
evidence).
"""

from __future__ import annotations

import logging
import math
import os
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import torch

from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import DEFAULT_MODELS, HHEM_FOUNDATION
from fspo.launch.preflight import check_verifier, has_tokenizer_files
from fspo.utils.checked_load import from_pretrained_checked, load_config, load_tokenizer
from fspo.utils.input_files import parse_json
from fspo.verifiers.base import Pair
from fspo.verifiers.batching import Features
from fspo.verifiers.model_base import (
    EVIDENCE_SPANS_CACHED,
    VERIFIER_ACTIVATION_BYTES,
    ModelVerifier,
    attention_cells,
)

logger = logging.getLogger(__name__)

HHEM_MODEL = DEFAULT_MODELS["hhem"]
# flan-t5-base's attention heads (HHEM's foundation), for the row cap below.
HHEM_HEADS = 12
ROW_CAP_STEP = 256


def longest_row_within(cells: int, step: int = ROW_CAP_STEP) -> int:
    """The longest row length, a multiple of ``step``, whose ``L x L`` attention fits in ``cells``."""
    return int(math.isqrt(cells) // step * step)


# fspo.verifier.max_row_tokens' default for hhem: rows up to here are scored whole (see the module doc).
HHEM_MAX_ROW_TOKENS = longest_row_within(attention_cells(VERIFIER_ACTIVATION_BYTES, HHEM_HEADS, torch.float32))
HHEM_PROMPT = "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}"


def _wrapper_t5_state(model_path: str) -> dict[str, torch.Tensor]:
    """The ``t5.*`` tensors of the wrapper checkpoint (directory or hub cache), prefix removed, with the
    encoder embedding filled in from ``shared`` when it was saved once as a tied weight."""
    from safetensors.torch import load_file

    if os.path.isdir(model_path):
        file = os.path.join(model_path, "model.safetensors")
    else:
        from huggingface_hub import hf_hub_download

        file = hf_hub_download(model_path, "model.safetensors")
    state = {k.removeprefix("t5."): v for k, v in load_file(file).items() if k.startswith("t5.")}
    if "transformer.encoder.embed_tokens.weight" not in state and "transformer.shared.weight" in state:
        state["transformer.encoder.embed_tokens.weight"] = state["transformer.shared.weight"]
    return state


def _load_t5_state(t5, model_path: str) -> None:
    missing, unexpected = t5.load_state_dict(_wrapper_t5_state(model_path), strict=False)
    if missing or unexpected:
        raise ValueError(f"{model_path} is not an HHEM checkpoint: missing {missing}, unexpected {unexpected}")


def load_hhem(
    model_path: str,
    tokenizer_path: str | None,
    dtype: torch.dtype,
    device: torch.device,
    trust_remote_code: bool = True,
):
    """Loads (model, tokenizer, prompt) from an HHEM checkpoint or a plain ``T5ForTokenClassification`` dir.

    The published checkpoint is loaded through its remote code; its ``t5`` weights are then re-read from
    the checkpoint file, because remote code written for transformers 4 may leave the tied encoder
    embedding randomly initialised under transformers 5 (a silent garbage verifier). If the remote code
    does not run at all, or with ``trust_remote_code=False``, the weights go into transformers' own
    ``T5ForTokenClassification`` built from ``config.foundation``: the same computation.
    """
    # A missing cache, token or foundation is named as the driver's preflight names it, not as a traceback.
    check_verifier(
        VerifierConfig(
            name="hhem", model_path=model_path, tokenizer_path=tokenizer_path, trust_remote_code=trust_remote_code
        )
    )
    from transformers import AutoModelForSequenceClassification, PretrainedConfig, T5ForTokenClassification

    config, _ = PretrainedConfig.get_config_dict(model_path)
    # HHEM-2.1-Open keeps `foundation` and `prompt` as class attributes of its config class, so they
    # may be absent from config.json: fall back to the published values.
    foundation = config.get("foundation") or HHEM_FOUNDATION
    prompt = config.get("prompt") or HHEM_PROMPT
    model = None
    if config.get("model_type") == "t5":  # a bare HHEM-architecture model (benchmarks, fine-tunes)
        model = from_pretrained_checked(T5ForTokenClassification, model_path, dtype=dtype)
    elif trust_remote_code:
        try:
            # Its t5 weights are re-read below: what the remote code leaves at random is filled (missing_ok).
            model = from_pretrained_checked(
                AutoModelForSequenceClassification, model_path, trust_remote_code=True, missing_ok=True
            )
        except Exception as error:  # noqa: BLE001 - any remote-code failure has the same way round
            logger.warning(
                "HHEM remote code failed (%r); loading its weights into T5ForTokenClassification",
                error,
            )
        else:
            prompt = getattr(model.config, "prompt", None) or prompt
            _load_t5_state(model.t5, model_path)
            model = model.to(dtype)
    if model is None:
        model = T5ForTokenClassification(load_config(foundation, num_labels=2))
        _load_t5_state(model, model_path)
        model = model.to(dtype)
    if tokenizer_path is None:
        tokenizer_path = model_path if has_tokenizer_files(model_path) else foundation
    tokenizer = load_tokenizer(tokenizer_path)
    return model.to(device).eval(), tokenizer, prompt


def claim_splits_off(tokenizer, prompt: str) -> bool:
    """Whether ``tokenizer``'s ids of ``prompt`` are its ids up to the claim followed by the claim's own, for every
    evidence and claim: the prompt ends with `` {text2}``, the tokenizer splits its input at whitespace before
    anything else (T5's ``WhitespaceSplit``, which drops the whitespace, so no token spans the cut) and adds
    special tokens only after the text (T5: ``</s>``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not prompt.endswith(" {text2}") or prompt.count("{text2}") != 1:
        return False
    pre_tokenizer = parse_json("the tokenizer's serialization", backend.to_str()).get("pre_tokenizer") or {}
    first = (pre_tokenizer.get("pretokenizers") or [pre_tokenizer])[0] if pre_tokenizer else {}
    if first.get("type") != "WhitespaceSplit":
        return False
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return tokenizer("a")["input_ids"][: len(plain)] == plain  # special tokens, if any, come after the text


class PromptIds:
    """Token ids of HHEM's prompt filled with each pair, as ``tokenizer(prompt.format(...))`` gives them.

    Every rollout of a prompt brings the same evidence with each of its steps: where :func:`claim_splits_off`
    holds, the prompt up to the claim is tokenized once per distinct evidence (kept for the last
    ``EVIDENCE_SPANS_CACHED``) and only the claim once per pair; elsewhere each prompt is tokenized whole.
    """

    def __init__(self, tokenizer, prompt: str):
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.split = claim_splits_off(tokenizer, prompt)
        self.head = prompt.rsplit(" {text2}", 1)[0] if self.split else prompt
        self._heads: OrderedDict[str, array] = OrderedDict()
        self.heads_tokenized = 0

    def __call__(self, pairs: Sequence[Pair]) -> list[list[int]]:
        if not self.split:
            return self.tokenizer([self.prompt.format(text1=e, text2=c) for e, c in pairs])["input_ids"]
        missing = list(dict.fromkeys(evidence for evidence, _ in pairs if evidence not in self._heads))
        if missing:
            texts = [self.head.format(text1=evidence) for evidence in missing]
            for evidence, ids in zip(missing, self.tokenizer(texts, add_special_tokens=False)["input_ids"]):
                self._heads[evidence] = array("i", ids)
            self.heads_tokenized += len(missing)
        claims = self.tokenizer([" " + claim for _, claim in pairs])["input_ids"]  # with the special tokens after
        rows = []
        for (evidence, _), claim_ids in zip(pairs, claims):
            self._heads.move_to_end(evidence)
            rows.append([*self._heads[evidence], *claim_ids])
        while len(self._heads) > EVIDENCE_SPANS_CACHED:
            self._heads.popitem(last=False)
        return rows


class HHEMVerifier(ModelVerifier):
    """Scores pairs with HHEM-2.1-Open, batched across the whole training step.

    Args:
        model_path: HHEM checkpoint (hub id or directory), or a ``T5ForTokenClassification`` directory.
        tokenizer_path: tokenizer to use; default: the checkpoint's own, else ``config.foundation``.
        trust_remote_code: run the checkpoint's own code (default, as published); ``False`` loads its
            weights into transformers' ``T5ForTokenClassification`` instead.
        max_row_tokens: rows longer than this are windowed (default ``HHEM_MAX_ROW_TOKENS``, the memory
            cap; ``0``: every premise whole, as Vectara's ``predict()``).
        **kwargs: device, dtype (published in float32; default: TF32 matmuls on CUDA, float32 on a CPU),
            max_tokens_per_batch,
            long_evidence, evidence_top_k, cache_size (see [`~fspo.verifiers.model_base.ModelVerifier`]).
    """

    name = "hhem"

    def __init__(
        self,
        model_path: str = HHEM_MODEL,
        tokenizer_path: str | None = None,
        trust_remote_code: bool = True,
        max_row_tokens: int | None = HHEM_MAX_ROW_TOKENS,
        **kwargs,
    ):
        super().__init__(max_row_tokens=max_row_tokens, **kwargs)
        self.model, self.tokenizer, self.prompt = load_hhem(
            model_path, tokenizer_path, self.dtype, self.device, trust_remote_code
        )
        heads = getattr(self.model, "t5", self.model).config.num_heads
        self.max_attention_cells = attention_cells(VERIFIER_ACTIVATION_BYTES, heads, self.dtype)
        self.prompt_ids = PromptIds(self.tokenizer, self.prompt)

    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]:
        return [{"input_ids": ids} for ids in self.prompt_ids(pairs)], list(range(len(pairs)))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        if logits.dim() == 3:  # the bare T5 token classifier; the HHEM wrapper already took token 0
            logits = logits[:, 0, :]
        return torch.softmax(logits.float(), dim=-1)[:, 1]
