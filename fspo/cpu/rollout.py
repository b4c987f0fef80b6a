"""``hf``: a small rollout backend for verl's agent loop that samples with ``transformers``.

verl 0.9.1 only knows server backends (vLLM, SGLang, TensorRT-LLM), none of which runs on a
CPU. This backend plays the same three roles with ``transformers``:

- :class:`HFRolloutServer`, a Ray actor that serves token-in/token-out ``generate`` requests.
  Requests that arrive together are generated together: the server gathers whatever is queued,
  groups it by sampling parameters and decodes each group as one left-padded batch (temperature,
  top-p, top-k, repetition penalty, log-probs of the sampled tokens). A request that carries a
  ``seed`` (vLLM's per-request seed; :mod:`fspo.cpu.agent_loop` sends one per rollout) samples from
  its own generator, so its tokens do not depend on its batch-mates or on when it arrived.
- :class:`HFReplica`, the :class:`~verl.workers.rollout.replica.RolloutReplica` that launches
  one server per replica.
- :class:`HFServerAdapter`, the :class:`~verl.workers.rollout.base.BaseRollout` living in the
  hybrid actor worker, which receives the FSDP actor's weights through verl's default
  ``naive`` checkpoint engine and hands them to its server (through shared memory where it can:
  :mod:`fspo.cpu.weight_file`). A LoRA actor sends, as to vLLM, only
  its adapter with the peft config; the server applies it to the base weights it read from disk.

Select it with ``actor_rollout_ref.rollout.name=hf``. It has no OpenAI HTTP endpoint, so agent
loops that talk HTTP to the rollout (tool agents) are not supported; the single-turn loop is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Optional

import ray
import torch
from transformers.cache_utils import Cache, DynamicLayer

from fspo.config.environment import ENVIRONMENT, environment_value
from fspo.cpu import weight_file
from fspo.cpu.compute import use_all_threads
from fspo.cpu.row_attention import ROW_ATTENTION
from fspo.cpu.row_attention import register as register_row_attention
from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.utils.coalesce import Coalescer

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf"
ADAPTER_FQN = "fspo.cpu.rollout.HFServerAdapter"


def register() -> None:
    """Make ``rollout.name=hf`` known to verl's rollout registries (idempotent)."""
    from verl.workers.rollout import base, replica

    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER_FQN
    replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFReplica)


def server_actor_name(replica_rank: int, name_suffix: str = "", role: str = "") -> str:
    """The Ray actor name of a replica's server; the adapter finds its server by this name."""
    role_part = f"{role}_" if role else ""
    return f"{ROLLOUT_NAME}_server_{role_part}{replica_rank}_0{name_suffix}"


# ---------------------------------------------------------------------------------------------
# Sampling: pure functions, testable without Ray.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling parameters verl's agent loop sends, normalised (hashable, so requests can
    be grouped: one batched ``generate`` per distinct setting)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off (verl sends -1)
    repetition_penalty: float = 1.0
    logprobs: bool = False
    # What a log-prob means, as vLLM's `logprobs_mode` (verl's `rollout.logprobs_mode`): of the
    # distribution sampled from (after penalties, temperature, top-k/top-p) or of the raw logits.
    logprobs_mode: str = "processed_logprobs"

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


KNOWN_SAMPLING_KEYS = {
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "logprobs",
    "max_tokens",
    "max_new_tokens",
    "ignore_eos",
    "seed",
}


LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


def sampling_settings(
    params: dict[str, Any],
    prompt_len: int,
    prompt_length: int,
    response_length: int,
    max_model_len: int,
    logprobs_mode: str = "processed_logprobs",
) -> SamplingSettings:
    """Turn one request's sampling params into :class:`SamplingSettings`.

    ``max_new_tokens`` follows verl's vLLM server: the request's ``max_tokens`` if given, else
    the configured response length, capped by the prompt+response budget and the context left.
    """
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(
            f"actor_rollout_ref.rollout.logprobs_mode={logprobs_mode!r}: the hf rollout returns log-probs "
            f"({', '.join(LOGPROBS_MODES)}), not logits"
        )
    unknown = set(params) - KNOWN_SAMPLING_KEYS
    if unknown:
        logger.warning("hf rollout ignores sampling params %s", sorted(unknown))
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(
            f"prompt of {prompt_len} tokens leaves no room to generate within max_model_len={max_model_len}; "
            "raise actor_rollout_ref.rollout.max_model_len or shorten data.max_prompt_length"
        )
    requested = params.get("max_tokens", params.get("max_new_tokens"))
    if requested is None:
        requested = min(response_length, prompt_length + response_length - prompt_len)
    top_k = int(params.get("top_k", -1) or 0)
    return SamplingSettings(
        max_new_tokens=max(1, min(int(requested), room)),
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=max(top_k, 0),
        repetition_penalty=float(params.get("repetition_penalty", 1.0) or 1.0),
        logprobs=bool(params.get("logprobs", False)),
        logprobs_mode=logprobs_mode,
    )


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into ``(input_ids, attention_mask)`` for batched generation."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
    return input_ids, attention_mask


def row_generator(seed: Optional[int]) -> Optional[torch.Generator]:
    """The generator one request samples from: its own, seeded with the request's ``seed`` (vLLM's
    per-request ``SamplingParams.seed``), or None (torch's global generator) for a request without one."""
    if seed is None:
        return None
    generator = torch.Generator()
    generator.manual_seed(int(seed) % 2**63)
    return generator


def _score_processors(settings: SamplingSettings) -> list:
    """The logits processors ``transformers.generate`` applies, in its order: repetition penalty, then
    (when sampling) temperature, top-k, top-p."""
    from transformers.generation.logits_process import (
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    processors: list = []
    if settings.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(settings.repetition_penalty))
    if settings.greedy:
        return processors
    if settings.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(settings.temperature))
    if settings.top_k > 0:
        processors.append(TopKLogitsWarper(settings.top_k))
    if settings.top_p < 1.0:
        processors.append(TopPLogitsWarper(settings.top_p))
    return processors


DECODE_ROWS_ENV = "FSPO_DECODE_ROWS"
NO_KEYS = 2**62  # a key start past any cache: the row's attention is skipped (filler and finished rows)
DEFAULT_DECODE_ROWS = ENVIRONMENT[DECODE_ROWS_ENV].default


def decode_rows() -> int:
    """Rows in every decoding step (:func:`generate_batch`): ``FSPO_DECODE_ROWS``, else 8."""
    return environment_value(DECODE_ROWS_ENV)


@contextlib.contextmanager
def _row_attention(model: torch.nn.Module):
    """``model`` computing attention with :func:`fspo.cpu.row_attention.row_attention` for the duration."""
    register_row_attention()
    configs = [model.config]
    text_config = model.config.get_text_config()
    if text_config is not model.config:
        configs.append(text_config)
    previous = [config._attn_implementation for config in configs]
    for config in configs:
        config._attn_implementation = ROW_ATTENTION
    try:
        yield
    finally:
        for config, name in zip(configs, previous):
            config._attn_implementation = name


def transposed_decode_products() -> bool:
    """Whether decoding steps compute their linear layers as ``(W @ xᵀ)ᵀ`` (:func:`_transposed_linears`): on AVX2,
    where MKL multiplies a few rows by a weight ~1.7 times faster that way round; elsewhere it is not faster
    (AVX512 float32: up to 3 times slower for the output layer; bfloat16: slower, with the same bits)."""
    return torch.backends.cpu.get_cpu_capability() == "AVX2"


def _transposed_linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` as ``(W @ xᵀ)ᵀ``. Each row's result still depends on that row only; it differs from ``x @ Wᵀ``
    in the last bits (float32: up to ~3e-6 on SmolLM2-135M's shapes)."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(layer.weight, flat.T).T.contiguous()
    if layer.bias is not None:
        out = out + layer.bias
    return out.reshape(*x.shape[:-1], layer.out_features)


@contextlib.contextmanager
def _transposed_linears(model: torch.nn.Module, active: bool):
    """``model``'s ``nn.Linear`` layers computing :func:`_transposed_linear` for the duration, if ``active``."""
    layers = [
        module
        for module in model.modules()
        if active and type(module) is torch.nn.Linear and "forward" not in vars(module)  # not already wrapped
    ]
    for layer in layers:
        layer.forward = functools.partial(_transposed_linear, layer)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward


def _forward(model: torch.nn.Module, step_ids, positions, past, key_starts):
    # Only the last position's logits: over a 150k-token vocabulary the prompt's would cost more than the rest.
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    output = model(
        input_ids=step_ids,
        position_ids=positions,
        past_key_values=past,
        use_cache=True,
        key_starts=key_starts,
        **last_only,
    )
    return output.logits[:, -1, :].float(), output.past_key_values


def _prefill_prompt(model: torch.nn.Module, prompt: list[int]):
    """One prompt's forward alone (no padding, its own shapes): its last logits and each layer's keys and values."""
    ids = torch.tensor([prompt], dtype=torch.long)
    logits, cache = _forward(model, ids, torch.arange(len(prompt))[None], None, torch.zeros(1, dtype=torch.long))
    return logits[0], [(layer.keys, layer.values) for layer in cache.layers]


class PrefillStore:
    """Each distinct prompt's forward (:func:`_prefill_prompt`), run once for all the rows that start from it (a
    GRPO group is ``n`` rollouts of one prompt) and dropped when the last of them has taken it. A row's prefill
    is the same computation whether it runs or is shared, so sharing changes no bit."""

    def __init__(self, model: torch.nn.Module, prompts: list[list[int]]):
        self.model = model
        self.uses = Counter(tuple(prompt) for prompt in prompts)
        self.done: dict[tuple[int, ...], Any] = {}
        self.forwards = 0  # how many prompt forwards ran

    def take(self, prompt: list[int]):
        key = tuple(prompt)
        if key not in self.done:
            self.done[key] = _prefill_prompt(self.model, prompt)
            self.forwards += 1
        prefill = self.done[key]
        self.uses[key] -= 1
        if not self.uses[key]:
            del self.done[key]
        return prefill


class PreallocatedLayer(DynamicLayer):
    """A layer's keys and values in a buffer sized for the whole decode: each step writes its position in place.
    (``DynamicLayer`` concatenates, copying the whole cache every step: ~15% of a decoding step.) The keys it
    returns are views of the filled part, the same values as the concatenation."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, filled: int):
        super().__init__()
        self.buffer_keys, self.buffer_values, self.filled = keys, values, filled
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._expose()

    def _expose(self) -> None:
        self.keys = self.buffer_keys[:, :, : self.filled]
        self.values = self.buffer_values[:, :, : self.filled]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        width = key_states.shape[2]
        if self.filled + width > self.buffer_keys.shape[2]:
            raise RuntimeError(f"decode cache of {self.buffer_keys.shape[2]} positions is full")
        self.buffer_keys[:, :, self.filled : self.filled + width] = key_states
        self.buffer_values[:, :, self.filled : self.filled + width] = value_states
        self.filled += width
        self._expose()
        return self.keys, self.values


def _prefill_rows(prompts: list[list[int]], rows: int, store: PrefillStore, new_tokens: int):
    """Each prompt's prefill (from ``store``), its cache left-padded into one of ``rows`` rows with room for
    ``new_tokens`` more positions (rows past the prompts are fillers with no keys). Returns the last logits, the
    cache, the key starts."""
    prefills = [store.take(prompt) for prompt in prompts]
    width = max(len(p) for p in prompts)
    starts = torch.tensor([width - len(p) for p in prompts] + [NO_KEYS] * (rows - len(prompts)), dtype=torch.long)
    layers = []
    for layer in range(len(prefills[0][1])):
        buffers = []
        for part in (0, 1):  # keys, values
            tensors = [layers_of_row[layer][part] for _, layers_of_row in prefills]
            buffer = tensors[0].new_zeros((rows, tensors[0].shape[1], width + new_tokens, tensors[0].shape[-1]))
            for row, tensor in enumerate(tensors):
                buffer[row, :, width - tensor.shape[2] : width] = tensor[0]
            buffers.append(buffer)
        layers.append(PreallocatedLayer(*buffers, filled=width))
    return torch.stack([logits for logits, _ in prefills]), Cache(layers=layers), starts


def pad_token_id(tokenizer) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its end-of-sequence token, else 0."""
    return next(int(i) for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None)


def stop_token_ids(model, tokenizer) -> set[int]:
    """The ids that end a sample: the model's generation-config EOS (one id or a list) and the tokenizer's."""
    ids: set[int] = set()
    for source in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module,
    prompts: list[list[int]],
    settings: SamplingSettings,
    pad_id: int,
    stop_ids: set[int],
    seeds: Optional[list[Optional[int]]] = None,
    rows_per_step: Optional[int] = None,
) -> list[tuple[list[int], Optional[list[float]]]]:
    """Sample a response to each prompt; the prompts share ``settings``.

    A request's tokens and log-probs do not depend, to the last bit, on which requests share its batch: each
    row runs the same computation on the same shapes whatever its batch-mates. Its prompt's forward runs alone
    (no padding), once for all the rows that start from it (:class:`PrefillStore`); the decoding steps run
    ``rows_per_step`` rows at a time (:func:`decode_rows`; a smaller group is filled up with rows that have no
    keys), because a matrix product's rounding changes with its
    row count below some size on some CPUs (MKL on AVX2: 1-3, 5-7, 9-11 rows differ from 12 and more);
    attention runs row by row over each row's own keys (:mod:`fspo.cpu.row_attention`), because the amount of
    left padding changes its rounding. Each row draws its tokens from its own generator (:func:`row_generator`
    of its entry in ``seeds``), and its repetition penalty looks at its own prompt and response only.
    (``transformers.generate`` samples every row from torch's one global generator and pads, which is why
    this is a loop of its own.)

    Returns, per prompt, the response token ids (up to and including the first stop token) and, if asked,
    each sampled token's log-probability. With ``processed_logprobs`` (verl's default, as its vLLM server
    is started) that is the log-softmax of the scores sampled from: the logits after repetition penalty,
    temperature and top-k/top-p filtering, so at temperature T it is what verl's actor computes from
    ``logits / T``. With ``raw_logprobs`` it is the log-softmax of the logits.
    """
    group = rows_per_step or decode_rows()
    seeds = list(seeds or [None] * len(prompts))
    results: list[tuple[list[int], Optional[list[float]]]] = []
    store = PrefillStore(model, prompts)
    with _row_attention(model):
        for first in range(0, len(prompts), group):
            chunk = slice(first, first + group)
            results += _generate_group(model, prompts[chunk], settings, pad_id, stop_ids, seeds[chunk], group, store)
    return results


def _generate_group(model, prompts, settings, pad_id, stop_ids, seeds, rows, store):
    count = len(prompts)
    generators = [row_generator(seed) for seed in seeds]
    processors = _score_processors(settings)
    seen = [torch.tensor(prompt, dtype=torch.long) for prompt in prompts]  # what a repetition penalty looks at
    responses: list[list[int]] = [[] for _ in range(count)]
    logprobs: list[list[float]] = [[] for _ in range(count)]
    running = [True] * count
    logits, past, key_starts = _prefill_rows(prompts, rows, store, settings.max_new_tokens)
    transposed = transposed_decode_products()  # decoding steps only: a prompt's forward has many rows
    positions = torch.tensor([len(p) for p in prompts] + [0] * (rows - count), dtype=torch.long)[:, None]
    for step in range(settings.max_new_tokens):
        chosen = torch.full((count,), pad_id, dtype=torch.long)
        picked = [0.0] * count
        for row in range(count):
            if not running[row]:
                continue
            raw = logits[row : row + 1]
            scores = raw
            for processor in processors:
                scores = processor(seen[row][None], scores)
            if settings.greedy:
                token = scores.argmax(dim=-1)[0]
            else:
                token = torch.multinomial(torch.softmax(scores, dim=-1)[0], 1, generator=generators[row])[0]
            chosen[row] = token
            if settings.logprobs:
                source = scores if settings.logprobs_mode == "processed_logprobs" else raw
                picked[row] = float(torch.log_softmax(source, dim=-1)[0, token])
        for row in range(count):
            if not running[row]:
                continue
            token = int(chosen[row])
            responses[row].append(token)
            if settings.logprobs:
                logprobs[row].append(picked[row])
            seen[row] = torch.cat([seen[row], chosen[row : row + 1]])
            running[row] = token not in stop_ids
            if not running[row]:
                key_starts[row] = NO_KEYS  # its attention is no longer read: skip it
        if not any(running) or step == settings.max_new_tokens - 1:
            break  # the last token sampled needs no forward: nothing reads its logits
        step_ids = torch.full((rows, 1), pad_id, dtype=torch.long)  # finished and filler rows are fed padding
        step_ids[:count, 0] = chosen
        with _transposed_linears(model, transposed):
            logits, past = _forward(model, step_ids, positions, past, key_starts)
        logits = logits[:count]
        positions = positions + 1
    return [(tokens, logprobs[row] if settings.logprobs else None) for row, tokens in enumerate(responses)]


# ---------------------------------------------------------------------------------------------
# The server actor.
# ---------------------------------------------------------------------------------------------


class HFRolloutServer:
    """Token-in/token-out generation with a ``transformers`` causal LM (a Ray actor).

    ``generate`` calls go through a :class:`~fspo.utils.coalesce.Coalescer` keyed by sampling settings:
    the rollouts of a training step (``batch_size * n`` requests, sent at once by the agent loop)
    are decoded together in one left-padded batch per distinct setting (:func:`generate_batch`),
    each row drawing from the generator of its request's ``seed``.
    """

    def __init__(self, config, model_config, replica_rank: int = 0, max_batch_size: int = 0):
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.torch_dtypes import PrecisionType
        from verl.workers.config import HFModelConfig

        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.global_steps: Optional[int] = None
        use_all_threads()  # the rollout and the trainer take turns on the machine

        path = self.model_config.local_path
        trust = bool(self.model_config.trust_remote_code)
        self.tokenizer = load_tokenizer(path, trust_remote_code=trust)
        # `rollout.dtype`: the CPU preset sets it to the actor's compute dtype (fspo.cpu.compute). The position
        # table was checked against the run's lengths before Ray started (fspo.training.config_checks).
        self.model = from_pretrained_checked(
            AutoModelForCausalLM,
            path,
            dtype=PrecisionType.to_dtype(self.config.dtype),
            trust_remote_code=trust,
            attn_implementation="sdpa",
        )
        self.model.eval()
        self.pad_id = pad_token_id(self.tokenizer)
        self.stop_ids = stop_token_ids(self.model, self.tokenizer)
        self._batcher: Optional[Coalescer] = None
        self._max_batch_size = max_batch_size or int(self.config.max_num_seqs or 256)
        # The LoRA config of the adapter applied on the base weights (None: the plain model).
        self.adapter_config = None

    def ready(self) -> bool:
        return True

    # -- generation --------------------------------------------------------------------------

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        **_: Any,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data or video_data:
            raise NotImplementedError("the hf rollout backend serves text-only models")
        prompt_ids = [int(t) for t in prompt_ids]
        settings = sampling_settings(
            dict(sampling_params),
            len(prompt_ids),
            self.config.prompt_length,
            self.config.response_length,
            self.config.max_model_len or (self.config.prompt_length + self.config.response_length),
            self.config.logprobs_mode or "processed_logprobs",
        )
        seed = sampling_params.get("seed")
        [(tokens, logprobs)], _ = await self._coalescer().submit(
            [(prompt_ids, None if seed is None else int(seed))], key=settings
        )
        return TokenOutput(
            token_ids=tokens,
            log_probs=logprobs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def _coalescer(self) -> Coalescer:
        # Created on first use: the Coalescer's lock must belong to the actor's event loop.
        if self._batcher is None:
            self._batcher = Coalescer(self._generate_group, window_s=0.05, max_items=self._max_batch_size)
        return self._batcher

    def _generate_group(self, settings: SamplingSettings, requests: list[tuple[list[int], Optional[int]]]):
        # Rows in a fixed order, not in the order the requests arrived (a row's bits do not depend on its batch,
        # but the same requests then make the same batches). By prompt first: a group's rows decode side by side,
        # so the shared prefill (PrefillStore) is held for a few prompts at a time, not the whole step's.
        order = sorted(
            range(len(requests)), key=lambda i: (requests[i][0], requests[i][1] is None, requests[i][1] or 0)
        )
        prompts, seeds = [requests[i][0] for i in order], [requests[i][1] for i in order]
        results = generate_batch(self.model, prompts, settings, self.pad_id, self.stop_ids, seeds)
        unsorted: list = [None] * len(requests)
        for position, index in enumerate(order):
            unsorted[index] = results[position]
        return unsorted

    # -- weights -----------------------------------------------------------------------------

    async def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor],
        global_steps: Optional[int] = None,
        peft_config: Any = None,
        base_sync_done: bool = False,
    ):
        """Load what the actor sends after an update, as verl's vLLM server takes it; ``named_tensors`` may be
        a :class:`~fspo.cpu.weight_file.StagedWeights` (returns None when its file is not on this machine).

        Without ``peft_config``: the full (HF-named) weights. With it (a LoRA actor, ``lora.merge`` off):
        ``base_sync_done`` means ``named_tensors`` are the adapter alone (peft's names, e.g.
        ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``), applied to the base weights
        this server read from ``model.path`` (``rollout.load_format=safetensors``); otherwise they are the
        base weights, named as for a LoRA-wrapped model (``...q_proj.base_layer.weight``).
        """
        started = time.time()
        if isinstance(named_tensors, weight_file.StagedWeights):  # the sender staged them in shared memory
            named_tensors = weight_file.read(named_tensors.path, named_tensors.size, named_tensors.entries)
            if named_tensors is None:
                return None  # not on this machine: the sender sends the tensors themselves
        async with self._coalescer().lock:  # never swap weights under a running batch
            if peft_config is not None and base_sync_done:
                self._load_adapter(named_tensors, peft_config)
            else:
                self._load_base(named_tensors)
        if global_steps is not None:
            self.global_steps = global_steps
        return {"loaded": len(named_tensors), "seconds": time.time() - started}

    def _load_base(self, named_tensors: dict[str, torch.Tensor]) -> None:
        if self.adapter_config is not None:
            raise RuntimeError(
                "hf rollout: full weights arrived after a LoRA adapter was applied; verl syncs the base once, first"
            )
        # verl names the base weights of LoRA-wrapped layers as peft does; the plain model has no `.base_layer`.
        named_tensors = {name.replace(".base_layer.", "."): tensor for name, tensor in named_tensors.items()}
        own = self.model.state_dict()
        unknown = sorted(set(named_tensors) - set(own))
        if unknown:
            raise KeyError(f"hf rollout: actor sent weights this model does not have: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in named_tensors.items():
                own[name].copy_(tensor.to(own[name].dtype))
        if getattr(self.model.config, "tie_word_embeddings", False):
            self.model.tie_weights()

    def _load_adapter(self, named_tensors: dict[str, torch.Tensor], peft_config: Any) -> None:
        """Sample from base + adapter: wrap the model in peft's LoRA layers once, then load each new adapter."""
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        config = peft_config if isinstance(peft_config, LoraConfig) else LoraConfig(**dict(peft_config))
        if self.adapter_config is None:
            self.model = get_peft_model(self.model, config)
            self.model.eval()
            self.adapter_config = config
        elif (config.r, config.lora_alpha, config.target_modules) != (
            self.adapter_config.r,
            self.adapter_config.lora_alpha,
            self.adapter_config.target_modules,
        ):
            raise ValueError(f"hf rollout: the actor's LoRA config changed during the run: {config}")
        result = set_peft_model_state_dict(self.model, named_tensors)
        if result.unexpected_keys:
            raise KeyError(
                f"hf rollout: actor sent adapter weights this model does not have: {result.unexpected_keys[:5]}"
            )
        adapter_names = {name for name, _ in self.model.named_parameters() if "lora_" in name}
        missing = sorted(name for name in result.missing_keys if name in adapter_names)
        if missing:
            raise KeyError(f"hf rollout: the actor's adapter lacks weights of this model's LoRA layers: {missing[:5]}")

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    # -- lifecycle hooks verl calls on every server; nothing to free or resume on a CPU --------

    async def wake_up(self, tags: Optional[list[str]] = None):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def wait_for_requests_to_drain(self):
        # Queued requests are picked up by the running flush, which holds the lock until done.
        await asyncio.sleep(0.1)
        async with self._coalescer().lock:
            return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False):
        # Batches are short and uninterruptible; let them finish rather than drop rollouts.
        await self.wait_for_requests_to_drain()
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True):
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self):
        return None

    async def resume_engine_generation(self):
        return None

    async def open_submission_gate(self):
        return None

    async def start_profile(self, **kwargs):
        return None

    async def stop_profile(self):
        return None


# ---------------------------------------------------------------------------------------------
# verl's two handles on the server: the replica (trainer side) and the adapter (actor side).
# ---------------------------------------------------------------------------------------------


def _replica_base():
    from verl.workers.rollout.replica import RolloutReplica

    return RolloutReplica


class HFReplica(_replica_base()):
    """One ``hf`` server per replica; tensor/pipeline parallelism does not apply."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    def _role(self) -> str:
        if self.is_reward_model:
            return "reward"
        if self.is_teacher_model:
            return "teacher"
        return ""

    async def launch_servers(self):
        name = server_actor_name(self.replica_rank, self.name_suffix, self._role())
        server = (
            ray.remote(HFRolloutServer)
            .options(name=name, max_concurrency=self.max_concurrency, num_cpus=0)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        # verl keys its load balancer by server address; this backend has no HTTP server.
        self._server_address = f"{name}.local:0"


def _adapter_base():
    from verl.workers.rollout.base import BaseRollout

    return BaseRollout


class HFServerAdapter(_adapter_base()):
    """The hybrid actor worker's end of the ``hf`` rollout: forwards weights to the server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = environment_value("RANK")
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % rollout_world_size
        self.server_handle = None
        self.server_reads_files = True  # until its server says the staged file is not on its machine

    def _server(self):
        if self.rollout_rank != 0:
            return None
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_actor_name(self.replica_rank))
        return self.server_handle

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    @torch.no_grad()
    async def update_weights(
        self,
        weights: Generator[tuple[str, torch.Tensor], None, None],
        wire_format: str = "named_tensors",
        global_steps: Optional[int] = None,
        peft_config: Any = None,
        base_sync_done: bool = False,
        **kwargs,
    ):
        """Forward the actor's weights to the server. A LoRA actor (``lora_rank > 0``, ``lora.merge`` off)
        sends, as to vLLM, its adapter tensors with the ``peft_config`` (``base_sync_done=True``), and once
        its base weights first if the rollout did not load them from disk (``load_format=dummy``)."""
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout backend takes full named tensors, not {wire_format!r}")
        # Every rank must walk the generator: producing a full tensor is a collective.
        named = {name: tensor.detach().to("cpu") for name, tensor in weights}
        server = self._server()
        if server is None:
            return
        # Through shared memory where the server can read it (fspo.cpu.weight_file): pickled, they cost seconds.
        staged = weight_file.stage(named) if self.server_reads_files else None
        if staged is None:
            named = {name: tensor.clone() for name, tensor in named.items()}  # not the engine's own storage
        else:
            try:
                if await server.load_weights.remote(staged, global_steps, peft_config, base_sync_done):
                    return
                self.server_reads_files = False  # on another machine: send the tensors from now on
                read = weight_file.read(staged.path, staged.size, staged.entries)
                named = {name: tensor.clone() for name, tensor in read.items()}  # as staged, before the await
            finally:
                staged.remove()
        await server.load_weights.remote(named, global_steps, peft_config, base_sync_done)
