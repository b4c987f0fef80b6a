"""Text generation for evaluation: vLLM when it is importable, else transformers batched generation."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fspo.cpu.compute import torch_compute_dtype
from fspo.training.prompt_formats import render_prompt
from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.utils.input_files import read_hf_config


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling settings shared by both backends: each draws from :meth:`sampling` alone, never from the
    model's ``generation_config.json`` (transformers' ``generate`` would take its top_k and repetition penalty,
    which vLLM's explicit sampling parameters leave out, so the two backends would sample differently).

    Args:
        temperature: 0 means greedy decoding.
        top_p: Nucleus sampling mass.
        top_k: Sample among the k likeliest tokens; 0 = every token.
        max_new_tokens: Longest response, in tokens.
        samples: Responses per prompt (pass@1 is averaged over them).
        batch_size: Prompts per forward batch (transformers backend only; vLLM schedules its own).
        seed: Seed of the sampler.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    samples: int = 1
    batch_size: int = 8
    seed: int = 0
    top_k: int = 0

    def sampling(self) -> dict[str, float | int]:
        """The sampling distribution, every knob that shapes it stated: both backends take it from here."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k, "repetition_penalty": 1.0}

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        for name in ("max_new_tokens", "samples", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class Generator(Protocol):
    def generate(self, prompts: list[str]) -> list[list[str]]:
        """`settings.samples` responses for each prompt, in prompt order."""


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def vllm_sampling_options(settings: GenerationSettings) -> dict:
    """``vllm.SamplingParams`` keyword arguments for ``settings`` (vLLM: temperature 0 is greedy, top_k -1 is off)."""
    sampling = settings.sampling()
    return {
        **sampling,
        "top_k": sampling["top_k"] or -1,
        "n": settings.samples,
        "max_tokens": settings.max_new_tokens,
        "seed": settings.seed,
    }


def hf_generation_config(settings: GenerationSettings, eos_token_id, pad_token_id):
    """A ``transformers.GenerationConfig`` for ``settings`` alone: the model's own sampling defaults (top_k,
    repetition penalty) are not merged in; only its end-of-sequence ids, at which vLLM stops too."""
    from transformers import GenerationConfig

    sampling = settings.sampling()
    greedy = sampling["temperature"] == 0
    common = dict(
        max_new_tokens=settings.max_new_tokens,
        num_return_sequences=1 if greedy else settings.samples,  # greedy: one response, repeated by the caller
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        repetition_penalty=sampling["repetition_penalty"],
    )
    if greedy:
        return GenerationConfig(do_sample=False, temperature=None, top_p=None, top_k=None, **common)
    return GenerationConfig(
        do_sample=True, temperature=sampling["temperature"], top_p=sampling["top_p"], top_k=sampling["top_k"], **common
    )


def render_prompts(tokenizer, rows: list[dict], prompt_format: str | None = None) -> list[str]:
    """The text each row's ``prompt`` messages render to, generation prompt included.

    Args:
        tokenizer: The model's tokenizer; its own chat template is used when `prompt_format` is None.
        rows: Rows in verl's RL format.
        prompt_format: ``qwen-base``, ``qwen-instruct`` or ``llama-instruct`` to override the template.
    """
    prompts = []
    for position, row in enumerate(rows):
        messages = row.get("prompt")
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError(f"row {position} has no chat messages in 'prompt' (was the parquet built by `fspo data`?)")
        messages = [dict(message) for message in messages]
        if prompt_format is not None:
            prompts.append(render_prompt(messages, prompt_format, tokenizer))
        else:
            if tokenizer.chat_template is None:
                raise ValueError("the model's tokenizer has no chat template; pass --prompt-format")
            prompts.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    return prompts


def stored_dtype(model_dir: str | Path) -> str | None:
    """The dtype a model folder's config.json says its weights are stored in (``dtype``, or transformers'
    older ``torch_dtype``), None if it says none."""
    if not (Path(model_dir) / "config.json").is_file():  # a hub id: loaded as its own config says
        return None
    config = read_hf_config(Path(model_dir))
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value).removeprefix("torch.") if value else None


def keeps_float32(model_dir: str | Path) -> bool:
    """Whether the model must be evaluated in float32: a LoRA fold (scripts/merge_checkpoint.sh) is stored so
    because its update is below bf16's resolution, and a bf16 load would evaluate the base instead."""
    return stored_dtype(model_dir) == "float32"


class VLLMGenerator:
    """Generation with `vllm.LLM` (GPU)."""

    def __init__(self, model_dir: str | Path, settings: GenerationSettings, tensor_parallel_size: int = 1):
        self.settings = settings
        from vllm import LLM, SamplingParams

        # vLLM's dtype "auto" serves a float32 checkpoint in 16 bits: name float32 where the weights need it.
        dtype = "float32" if keeps_float32(model_dir) else "auto"
        self.llm = LLM(model=str(model_dir), tensor_parallel_size=tensor_parallel_size, seed=settings.seed, dtype=dtype)
        self.tokenizer = self.llm.get_tokenizer()
        self.params = SamplingParams(**vllm_sampling_options(settings))

    def generate(self, prompts: list[str]) -> list[list[str]]:
        outputs = self.llm.generate(prompts, self.params, use_tqdm=False)
        return [[choice.text for choice in output.outputs] for output in outputs]


@contextmanager
def ieee_float32_matmuls(torch):
    """CUDA float32 matmuls in IEEE float32 for the block, then the process's setting again. A model verifier
    loaded into this process turns TF32 on process-wide (its GPU default, ``resolve_dtype``), and TF32's 10-bit
    mantissa would round away part of the update a float32 LoRA fold keeps."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = before


class HFGenerator:
    """Batched generation with transformers (CPU or a single GPU), prompts left-padded."""

    def __init__(self, model_dir: str | Path, settings: GenerationSettings, device: str | None = None, tokenizer=None):
        """``tokenizer``: the model's, already loaded (it is set to pad on the left); None loads it."""
        import torch
        from transformers import AutoModelForCausalLM

        self.settings = settings
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(str(model_dir))
        self.tokenizer.padding_side = "left"  # generation continues from the right edge of every prompt
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if keeps_float32(model_dir):
            dtype = torch.float32
        elif self.device.startswith("cuda"):
            dtype = torch.bfloat16
        else:  # bf16 only on a CPU with bf16 instructions: elsewhere it is several times slower
            dtype = torch_compute_dtype()
        # Positions were checked against the prompts (fspo.evaluation.cli.check_prompts_render).
        self.model = from_pretrained_checked(AutoModelForCausalLM, str(model_dir), dtype=dtype).to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        self.generation_config = hf_generation_config(
            settings, self.tokenizer.eos_token_id if eos is None else eos, self.tokenizer.pad_token_id
        )
        self._torch = torch

    def generate(self, prompts: list[str]) -> list[list[str]]:
        settings, torch = self.settings, self._torch
        responses: list[list[str]] = []
        for start in range(0, len(prompts), settings.batch_size):
            batch = prompts[start : start + settings.batch_size]
            # The chat template already holds the special tokens: add none.
            inputs = self.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            torch.manual_seed(settings.seed + start)
            precision = ieee_float32_matmuls(torch) if self.model.dtype == torch.float32 else nullcontext()
            with torch.no_grad(), precision:
                output = self.model.generate(**inputs, generation_config=self.generation_config)
            texts = self.tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
            drawn = self.generation_config.num_return_sequences
            repeat = settings.samples // drawn  # greedy decoding gives every sample the same response, as in vLLM
            responses += [texts[i : i + drawn] * repeat for i in range(0, len(texts), drawn)]
        return responses


def build_generator(model_dir: str | Path, settings: GenerationSettings, backend: str = "auto", **kwargs) -> Generator:
    """A generator for `model_dir`: ``vllm``, ``hf``, or ``auto`` (vLLM when importable, else transformers).

    ``kwargs``: ``tensor_parallel_size`` (vLLM); ``device`` and an already loaded ``tokenizer`` (transformers)."""
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model directory {model_dir} does not exist")
    if backend == "auto":
        backend = "vllm" if vllm_available() else "hf"
    if backend == "vllm":
        if not vllm_available():
            raise ImportError("backend 'vllm' asked for but vllm is not installed; use --backend hf")
        return VLLMGenerator(model_dir, settings, tensor_parallel_size=kwargs.get("tensor_parallel_size", 1))
    if backend == "hf":
        return HFGenerator(model_dir, settings, device=kwargs.get("device"), tokenizer=kwargs.get("tokenizer"))
    raise ValueError(f"unknown backend {backend!r}; choose auto, vllm or hf")
