"""The ``fspo.verifier`` block: which step verifier scores (evidence, step) pairs, where it runs, and its options.

One flat dataclass rather than one per backend: every option keeps its place on the command line
(``fspo.verifier.model_path=...``, as the recipes and the docs write it), every option is typed, and
each backend-specific field says in its metadata which backends take it (``backends``). Fields a
backend does not take are ignored for it with a warning, so one block can carry settings for several
backends while a user switches ``name``. A backend option left null takes the backend class's own
default (they differ per backend: HHEM's hub id, the packaged MiniLM, the NLI model's window).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Union

from verl.base_config import BaseConfig

from fspo.config.convert import to_dataclass
from fspo.config.numeric_options import VERIFIER_NUMBERS, check_numbers
from fspo.config.vocabulary import (
    EVIDENCE_UNITS,
    LONG_EVIDENCE,
    MODEL_BACKENDS,
    PLACEMENTS,
    ROW_WINDOW_BACKENDS,
    VERIFIER_DTYPES,
    VERIFIER_NAMES,
    ConfigError,
)

EVERY_BACKEND = VERIFIER_NAMES


def _option(default: Any, help: str, backends: tuple[str, ...] = ()) -> Any:
    """A field with its help text and, for options a backend's class takes, the backends that take it."""
    return field(default=default, metadata={"help": help, "backends": backends})


@dataclass
class VerifierConfig(BaseConfig):
    """The ``fspo.verifier`` block (``_target_: fspo.config.verifier.VerifierConfig``); see each field's ``help``.

    Build a verifier from it with :func:`fspo.verifiers.build_verifier`; where it runs is decided
    before Ray starts (:mod:`fspo.verifiers.placement`).
    """

    name: str = _option(
        "hhem",
        "The backend: lexical (offline word overlap), embedding (offline MiniLM cosine), "
        "hhem (Vectara HHEM-2.1-Open, the paper's), nli (any sequence-classification NLI "
        "model), llm_judge (an OpenAI-compatible chat server), minicheck (MiniCheck's "
        "Flan-T5/DeBERTa/RoBERTa fact checkers) or factcg (FactCG-DeBERTa-v3-Large).",
    )
    threshold: float = _option(
        0.5,
        "A step is supported (+1) when its score >= threshold (minicheck, factcg: > threshold, as their "
        "authors label), else -1; a NaN score (unverifiable) labels 0; training's default is the backend's "
        "calibrated threshold (lexical 1.0, the others 0.5: fspo.config.calibrated_thresholds). Measure it "
        "with `fspo verify --labelled`.",
    )
    evidence_top_k: Optional[int] = _option(
        None,
        "Check each step against only its k most relevant evidence sentences (fewer tokens); null = the "
        "whole evidence, as in the paper.",
        EVERY_BACKEND,
    )
    evidence_unit: Optional[str] = _option(
        None,
        "lexical: what a step's words are looked up in. whole = the whole evidence (a step whose words come from "
        "two unrelated sentences passes); sentence = also each clause of the step in its own best evidence "
        "sentence (or a chain of sentences linked by a shared name), the maximum over units as MiniCheck and "
        "FactCG take it over chunks, averaged with whole: 1 only when every clause is so supported, so a "
        "relation the evidence does not state fails and a multi-fact step passes clause by clause "
        "(fspo.verifiers.lexical). null = whole.",
        ("lexical",),
    )
    abstain_non_claims: Optional[bool] = _option(
        None,
        'lexical: label 0 a step that states no claim. No claim: a fragment ("Lima.", "Nora Vale works for") or a '
        'conclusion that only names the answer ("So the answer is Lima."), which the outcome reward scores; a '
        "bridging step with a predicate and two content words is checked as written (fspo.verifiers.lexical.is_claim). "
        "null = false.",
        ("lexical",),
    )
    cache_size: int = _option(
        0,
        "LRU entries (evidence, step) -> score kept per verifier copy; 0 = off. NaN scores are never cached.",
        EVERY_BACKEND,
    )
    coalesce_ms: float = _option(
        10.0, "Rollouts that reach the verifier within this many milliseconds are verified in one batched call."
    )
    placement: str = _option(
        "auto",
        "Where the verifier runs: colocated (one server per GPU of verl's actor "
        "pool, 1/3 of that GPU in Ray's accounting), local (a copy in each reward "
        "worker, one CPU thread each), ray (one named Ray actor with num_gpus of its "
        "own), or auto (colocated for a model backend on GPUs, local otherwise).",
    )
    num_gpus: float = _option(
        1.0, "placement=ray: GPUs the verifier server asks Ray for (keep one out of verl's pool)."
    )
    num_cpus: float = _option(1.0, "placement=ray or colocated: CPUs each verifier server asks Ray for.")
    request_timeout_s: float = _option(
        300.0,
        "placement=colocated or ray: seconds one attempt waits for a server's verdicts before another is asked. "
        "The wait includes queueing behind the batches merged before it; the server is set aside (or, when all "
        "were tried, the first due back from its back-off is asked: 30 s, doubling).",
    )
    request_deadline_s: Optional[float] = _option(
        None,
        "placement=colocated or ray: seconds a rollout's request may take in all; past it the rollout is left "
        "unlabelled. Retries and waits count; it is a verifier failure. null = 2 x request_timeout_s.",
    )
    max_failed_share: float = _option(
        0.1,
        "Run-level guard: an update where more than this share of verified rollouts failed is a verifier-loss "
        "update; 1 = never. Failed: servers dead or hung past the deadline, the backend raising; a rollout whose "
        "pairs failed in part counts that part (out-of-memory rows); missing evidence or steps, and steps with "
        "nothing to check, are no failure.",
    )
    max_failed_steps: int = _option(
        2,
        "Run-level guard: this many verifier-loss updates in a row stop the run with a message naming the cause "
        "(instead of training on as plain GRPO); 0 = never stop.",
    )
    start_timeout_s: float = _option(
        600.0,
        "placement=ray or colocated: seconds the verifier servers may take to "
        "start and load their model before the run fails instead of hanging.",
    )
    model_path: Optional[str] = _option(
        None,
        "Model directory or hub id. null: hhem = vectara/hallucination_evaluation_model, embedding = the "
        "packaged all-MiniLM-L6-v2, minicheck = lytang/MiniCheck-Flan-T5-Large, factcg = "
        "yaxili96/FactCG-DeBERTa-v3-Large; nli needs one.",
        MODEL_BACKENDS,
    )
    tokenizer_path: Optional[str] = _option(
        None, "Tokenizer directory or hub id; null = the model's own (hhem: its config.foundation).", MODEL_BACKENDS
    )
    device: Optional[str] = _option(
        None,
        "auto, cpu, cuda or cuda:N; null/auto = cuda when Ray gave the verifier's process a GPU, else cpu.",
        MODEL_BACKENDS,
    )
    dtype: Optional[str] = _option(
        None,
        "float32, tf32 (float32 with TF32 matmuls on CUDA), bfloat16 or float16; null = the backend's GPU default "
        "on CUDA (fspo.config.vocabulary.GPU_DTYPES: tf32, measured by benchmarks/verifier_precision.py) and "
        "float32 on a CPU (HHEM and the fact checkers are published in float32).",
        MODEL_BACKENDS,
    )
    max_tokens_per_batch: Optional[int] = _option(
        None,
        "Padded tokens per micro-batch of the model; null = the backend's default. A CUDA out-of-memory "
        "error halves it.",
        MODEL_BACKENDS,
    )
    max_row_tokens: Optional[int] = _option(
        None,
        "Most model tokens in one verifier row (prompt + evidence + step). A longer evidence is cut into "
        "overlapping windows that fit, and the step scores as its best window. null: hhem = 3072, the longest "
        "row whose T5 attention fits the verifier's 1.5 GB activation budget beside vLLM (evidence past ~3,000 "
        "tokens is windowed; shorter is scored whole, as Vectara's predict() and the paper do), nli/embedding = "
        "512; 0 = always the whole evidence (memory grows with the square of the longest). minicheck and "
        "factcg do not take it: they score their authors' sentence chunks.",
        ROW_WINDOW_BACKENDS,
    )
    long_evidence: Optional[str] = _option(
        None,
        "How an evidence past max_row_tokens is verified: chunks (every window, best one counts) or top_k "
        "(the step's evidence_top_k best sentences, 5 if unset, windowed if still too long: fewer rows, "
        "may drop the supporting sentence). null = chunks.",
        ROW_WINDOW_BACKENDS,
    )
    trust_remote_code: Optional[bool] = _option(
        None,
        "Run the checkpoint's own code. null: hhem true (as published; false loads its weights into "
        "transformers' T5ForTokenClassification), nli false.",
        ("hhem", "nli"),
    )
    max_length: Optional[int] = _option(
        None,
        "Tokens per model input. null: nli = the model's window, embedding = the backend's default.",
        ("embedding", "nli"),
    )
    stride: Optional[int] = _option(
        None, "nli: tokens shared by consecutive chunks of a long evidence; null = a quarter of the window.", ("nli",)
    )
    entailment_label: Optional[Union[str, int]] = _option(
        None, "nli: the label name or index that means supported, when the model's id2label names none.", ("nli",)
    )
    url: Optional[str] = _option(
        None,
        "llm_judge: the server root, its /v1 base or the full /v1/chat/completions URL; reward_router (set "
        "by itself when null and reward.reward_model.enable=true) = verl's reward-model servers.",
        ("llm_judge",),
    )
    model: Optional[str] = _option(None, "llm_judge: the model name sent in each request.", ("llm_judge",))
    api_key_env: Optional[str] = _option(
        None, "llm_judge: the environment variable that holds a Bearer key.", ("llm_judge",)
    )
    max_concurrency: Optional[int] = _option(
        None, "llm_judge: requests in flight at once; null = the backend's default.", ("llm_judge",)
    )
    timeout_s: Optional[float] = _option(
        None, "llm_judge: seconds per request before it counts as failed; null = the backend's default.", ("llm_judge",)
    )
    max_retries: Optional[int] = _option(
        None,
        "llm_judge: retries after a timeout, a connection error or HTTP 408/429/5xx; null = the backend's default.",
        ("llm_judge",),
    )
    backoff_s: Optional[float] = _option(
        None,
        "llm_judge: base of the exponential backoff between retries; null = the backend's default.",
        ("llm_judge",),
    )
    max_tokens: Optional[int] = _option(
        None,
        "llm_judge: completion budget (raise it for a reasoning judge); null = the backend's default.",
        ("llm_judge",),
    )
    temperature: Optional[float] = _option(
        None,
        "llm_judge: sampling temperature; null = the backend's default (0, deterministic verdicts).",
        ("llm_judge",),
    )
    reply_format: Optional[str] = _option(
        None,
        "llm_judge: verdict (one claim a request, SUPPORTED/UNSUPPORTED) or first_error (one agent run's steps a "
        "request, FAPO-GenRM's first wrong step as \\boxed{k}, -1 for none); null = verdict.",
        ("llm_judge",),
    )

    def __post_init__(self):
        check_name(self.name)
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"fspo.verifier.placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.long_evidence is not None and self.long_evidence not in LONG_EVIDENCE:
            raise ConfigError(
                f"fspo.verifier.long_evidence must be one of {', '.join(LONG_EVIDENCE)} or null, got {self.long_evidence!r}"
            )
        if self.reply_format is not None and self.reply_format not in ("verdict", "first_error"):
            raise ConfigError(
                f"fspo.verifier.reply_format must be verdict, first_error or null, got {self.reply_format!r}"
            )
        if self.evidence_unit is not None and self.evidence_unit not in EVIDENCE_UNITS:
            raise ConfigError(
                f"fspo.verifier.evidence_unit must be one of {', '.join(EVIDENCE_UNITS)} or null, "
                f"got {self.evidence_unit!r}"
            )
        if self.dtype is not None and self.dtype not in VERIFIER_DTYPES:
            raise ConfigError(
                f"fspo.verifier.dtype must be one of {', '.join(VERIFIER_DTYPES)} or null, got {self.dtype!r}"
            )
        # Ranges and dtypes are declared once, in fspo.config.numeric_options (fspo verify's flags share them).
        check_numbers(self, VERIFIER_NUMBERS, "fspo.verifier", ConfigError)

    @property
    def deadline_s(self) -> float:
        """One request's deadline across its retries (``request_deadline_s``, or 2 x ``request_timeout_s``)."""
        return self.request_deadline_s if self.request_deadline_s is not None else 2 * self.request_timeout_s

    def backend_options(self) -> dict:
        """The keyword arguments of backend ``name``'s class: its options that are set (null = its default).

        Raises:
            ConfigError: an option the backend cannot work without is missing (``nli``'s ``model_path``,
                ``llm_judge``'s ``url``).
        """
        options = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if self.name in f.metadata.get("backends", ()) and getattr(self, f.name) is not None
        }
        if self.name == "llm_judge" and options.get("url") is None:
            raise ConfigError(
                "fspo.verifier.name=llm_judge needs fspo.verifier.url (the OpenAI-compatible server), or "
                "reward.reward_model.enable=true to judge with verl's reward-model servers"
            )
        if self.name == "nli" and "model_path" not in options:
            raise ConfigError(
                "fspo.verifier.name=nli needs fspo.verifier.model_path (a sequence-classification NLI model)"
            )
        return options

    def ignored_options(self) -> list[str]:
        """Options set for other backends than ``name`` (a recipe's ``model_path`` while trying ``lexical``)."""
        return sorted(
            f.name
            for f in fields(self)
            if f.metadata.get("backends")
            and self.name not in f.metadata["backends"]
            and getattr(self, f.name) is not None
        )


def check_name(name) -> None:
    if name not in VERIFIER_NAMES:
        raise ConfigError(f"unknown fspo.verifier.name {name!r}; valid names: {', '.join(VERIFIER_NAMES)}")


def verifier_config(config: Mapping) -> VerifierConfig:
    """An ``fspo.verifier`` block (a ``VerifierConfig``, a ``DictConfig`` or a plain mapping) as a ``VerifierConfig``.

    Raises:
        ConfigError: an unknown name, an option no backend knows (naming the backend's valid options), a
            value of the wrong type or out of range.
    """
    if isinstance(config, VerifierConfig):
        return config
    if isinstance(config, Mapping):
        name = config.get("name", VerifierConfig.name)
        check_name(name)
        # The unknown-option message lists what the chosen backend takes, not every field.
        known = {f.name for f in fields(VerifierConfig)}
        unknown = sorted(str(key) for key in config if key not in known)
        if unknown:
            valid = sorted(
                f.name
                for f in fields(VerifierConfig)
                if not f.name.startswith("_") and (not f.metadata.get("backends") or name in f.metadata["backends"])
            )
            raise ConfigError(
                f"unknown option(s) {unknown} for fspo.verifier.name={name!r}; valid options: {', '.join(valid)}"
            )
    return to_dataclass(config, VerifierConfig, "fspo.verifier")
