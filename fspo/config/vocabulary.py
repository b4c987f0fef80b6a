"""The words a training config is written in: the error a bad value raises, and each closed set of values.

Everything else in ``fspo`` reads these names from here, so the config package depends on no other
``fspo`` module and a value's valid set is written once.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work, with what to change."""


# fspo.mode: how the step verdicts enter training: FSPO's advantage flip, KnowRL's factuality reward (fspo.methods.knowrl),
# FAPO's flawed-positive penalty (fspo.methods.fapo).
REWARD_MODES = ("fspo", "knowrl", "fapo")
# fspo.verifier.name: the step-verifier backends (fspo.verifiers).
VERIFIER_NAMES = ("lexical", "embedding", "hhem", "nli", "llm_judge", "minicheck", "factcg")
# The backends that load a model (weights on disk or the hub); lexical and llm_judge load none.
MODEL_BACKENDS = ("hhem", "nli", "embedding", "minicheck", "factcg")
# The model backends whose rows take fspo.verifier.max_row_tokens and long_evidence; minicheck and factcg
# cut evidence into their authors' sentence chunks instead (fspo.verifiers.chunking).
ROW_WINDOW_BACKENDS = ("hhem", "nli", "embedding")
# The backends whose authors label a pair supported when its score is strictly above the threshold
# (MiniCheck's and FactCG's `prob > 0.5`); the others label score >= threshold.
STRICT_THRESHOLD_BACKENDS = ("minicheck", "factcg")
# The hub model a model backend loads when fspo.verifier.model_path is null (embedding: a packaged folder).
DEFAULT_MODELS = {
    "hhem": "vectara/hallucination_evaluation_model",
    "minicheck": "lytang/MiniCheck-Flan-T5-Large",
    "factcg": "yaxili96/FactCG-DeBERTa-v3-Large",
}
# HHEM-2.1-Open's config.foundation: the T5 its remote code and tokenizer come from.
HHEM_FOUNDATION = "google/flan-t5-base"

# fspo.verifier.placement (fspo.verifiers.placement says what each one means).
PLACEMENTS = ("auto", "local", "colocated", "ray")
# fspo.verifier.url's value for "verl's reward-model router" (the address reward managers receive).
REWARD_ROUTER = "reward_router"
# fspo.verifier.long_evidence: how an evidence longer than max_row_tokens is verified.
LONG_EVIDENCE = ("chunks", "top_k")
# fspo.verifier.evidence_unit: what a step is checked against (fspo.verifiers.lexical says what each one means).
EVIDENCE_UNITS = ("whole", "sentence")
# fspo.verifier.dtype. tf32: float32 weights and activations, matmuls on CUDA in TF32 (float32 on a CPU).
VERIFIER_DTYPES = ("float32", "tf32", "bfloat16", "float16")
# fspo.verifier.dtype: null on a CUDA device, per model backend (on a CPU: float32). TF32 moved the published
# architectures' features by ~1e-3 of their size, bf16 by ~1e-2, and bf16's verdict flips near the threshold
# were several times TF32's (benchmarks/verifier_precision.py; docs/verifiers.md, "Verifier precision on GPUs").
GPU_DTYPES = {"hhem": "tf32", "nli": "tf32", "embedding": "tf32", "minicheck": "tf32", "factcg": "tf32"}

# fspo.label_outside_reasoning: off, or the label every token after the reasoning gets.
OUTSIDE_LABELS = (0, 1, -1)

# trainer.v1.trainer_mode values FSPO builds a trainer for: every V1 mode of verl 0.9.1 (they share the
# advantage and actor-update steps FSPO overrides).
TRAINER_MODES = ("sync", "colocate_async", "separate_async")
