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
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import torch

from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import DEFAULT_MODELS, HHEM_FOUNDATION
from fspo.preflight import check_verifier, has_tokenizer_files
from fspo.verifiers.base import Pair
from fspo.verifiers.batching import Features
from fspo.verifiers.model_base import ModelVerifier

logger = logging.getLogger(__name__)

HHEM_MODEL = DEFAULT_MODELS["hhem"]
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
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        PretrainedConfig,
        T5ForTokenClassification,
    )

    config, _ = PretrainedConfig.get_config_dict(model_path)
    # HHEM-2.1-Open keeps `foundation` and `prompt` as class attributes of its config class, so they
    # may be absent from config.json: fall back to the published values.
    foundation = config.get("foundation") or HHEM_FOUNDATION
    prompt = config.get("prompt") or HHEM_PROMPT
    model = None
    if config.get("model_type") == "t5":  # a bare HHEM-architecture model (benchmarks, fine-tunes)
        model = T5ForTokenClassification.from_pretrained(model_path, dtype=dtype)
    elif trust_remote_code:
        try:
            model = AutoModelForSequenceClassification.from_pretrained(model_path, trust_remote_code=True)
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
        model = T5ForTokenClassification(AutoConfig.from_pretrained(foundation, num_labels=2))
        _load_t5_state(model, model_path)
        model = model.to(dtype)
    if tokenizer_path is None:
        tokenizer_path = model_path if has_tokenizer_files(model_path) else foundation
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return model.to(device).eval(), tokenizer, prompt


class HHEMVerifier(ModelVerifier):
    """Scores pairs with HHEM-2.1-Open, batched across the whole training step.

    Args:
        model_path: HHEM checkpoint (hub id or directory), or a ``T5ForTokenClassification`` directory.
        tokenizer_path: tokenizer to use; default: the checkpoint's own, else ``config.foundation``.
        trust_remote_code: run the checkpoint's own code (default, as published); ``False`` loads its
            weights into transformers' ``T5ForTokenClassification`` instead.
        **kwargs: device, dtype (``float32`` by default, as published), max_tokens_per_batch,
            evidence_top_k, cache_size (see [`~fspo.verifiers.model_base.ModelVerifier`]).
    """

    name = "hhem"

    def __init__(
        self,
        model_path: str = HHEM_MODEL,
        tokenizer_path: str | None = None,
        trust_remote_code: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.model, self.tokenizer, self.prompt = load_hhem(
            model_path, tokenizer_path, self.dtype, self.device, trust_remote_code
        )

    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]:
        texts = [self.prompt.format(text1=evidence, text2=claim) for evidence, claim in pairs]
        ids = self.tokenizer(texts)["input_ids"]
        return [{"input_ids": row} for row in ids], list(range(len(pairs)))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        if logits.dim() == 3:  # the bare T5 token classifier; the HHEM wrapper already took token 0
            logits = logits[:, 0, :]
        return torch.softmax(logits.float(), dim=-1)[:, 1]
