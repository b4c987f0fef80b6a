"""``fspo fdpo train``: TRL's DPOTrainer with F-DPO's factuality-aware margin (needs the ``fdpo`` extra: trl).

F-DPO's loss is DPO's with the factuality margin inside beta, as its authors' trainer computes it
(:mod:`fspo.methods.fdpo.loss`): ``-log sigmoid(beta * (m - lambda * (h_rejected - h_chosen)))`` with ``m`` the log-ratio
difference of chosen over rejected and the pair's hallucination labels after the flip (:mod:`fspo.methods.fdpo.pairs`).

TRL's sigmoid loss has no per-pair margin; :class:`FDPOTrainer` adds one through TRL's own extension points:
with the reference log-probabilities precomputed (``precompute_ref_log_probs``), raising a pair's reference
log-probability of the chosen response by ``lambda * w`` lowers ``m`` by exactly ``lambda * w``, and everything
else (tokenisation, batching, the optimiser, saving) stays TRL's. TRL's ``rewards/chosen`` and
``rewards/margins`` metrics include that shift.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import DPOConfig, DPOTrainer

from fspo.methods.fdpo.loss import FDPO_BETA, FDPO_LAMBDA
from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.utils.input_files import read_jsonl
from fspo.utils.output_dir import install_staged, staging_folder
from fspo.utils.record_schemas import Pair

# The pairs file's column with h_rejected - h_chosen (fspo.methods.fdpo.pairs.pair_row).
MARGIN_COLUMN = "fdpo_margin_weight"
_PAIR_COLUMNS = ("prompt", "chosen", "rejected", MARGIN_COLUMN)


class MarginCollator:
    """TRL's preference collator plus each pair's margin weight as a float tensor."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, examples: list[dict]) -> dict:
        batch = self.inner(examples)
        batch[MARGIN_COLUMN] = torch.tensor([float(example[MARGIN_COLUMN]) for example in examples])
        return batch


class FDPOTrainer(DPOTrainer):
    """DPOTrainer whose sigmoid loss is ``-log sigmoid(beta * (m - lambda * (h_rejected - h_chosen)))`` per pair
    (module doc)."""

    def __init__(self, *args, factuality_lambda: float, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.precompute_ref_logps:
            raise ValueError("F-DPO's margin rides on precomputed reference log-probs: set precompute_ref_log_probs")
        if list(self.loss_types) != ["sigmoid"] or self.f_divergence_type != "reverse_kl":
            raise ValueError(f"F-DPO extends DPO's sigmoid loss; got loss_type={self.loss_types}")
        self.fdpo_lambda = float(factuality_lambda)
        self.data_collator = MarginCollator(self.data_collator)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if MARGIN_COLUMN not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, MARGIN_COLUMN]

    def compute_ref_log_probs(self, model, inputs):
        return super().compute_ref_log_probs(model, {k: v for k, v in inputs.items() if k != MARGIN_COLUMN})

    def _compute_loss(self, model, inputs, return_outputs):
        weights = inputs.pop(MARGIN_COLUMN).to(inputs["ref_chosen_logps"])
        # Inside beta, as the authors' logits - (h_l - h_w) * Delta: the shift is lambda * w, not divided by beta.
        inputs["ref_chosen_logps"] = inputs["ref_chosen_logps"] + self.fdpo_lambda * weights
        return super()._compute_loss(model, inputs, return_outputs)


def read_pairs(path: str | Path) -> list[dict]:
    """The rows of a pairs file (``fspo fdpo build-pairs``), each fitting :class:`fspo.utils.record_schemas.Pair`;
    raises ValueError (fspo.utils.input_files' one line) naming the file, the line and the field that does not fit."""
    rows = [{column: row[column] for column in _PAIR_COLUMNS} for row in read_jsonl(path, schema=Pair)]
    if not rows:
        raise ValueError(f"{path} holds no pairs")
    return rows


def train(
    model_dir: str | Path, pairs: list[dict], output_dir: str | Path, *, command: str = "fspo fdpo train", **settings
) -> Path:
    """Train ``model_dir`` on ``pairs`` with F-DPO and save a Hugging Face model (and tokenizer) in ``output_dir``;
    ``settings`` as :func:`build_trainer`'s."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # Saved beside, then moved in under fspo.utils.output_dir's rule: a user's file of the same name is refused, not
    # replaced, and a failed run leaves the folder as it was.
    staging = staging_folder(output_dir, command)
    try:
        trainer = build_trainer(model_dir, pairs, staging, **settings)
        trainer.train()
        trainer.save_model(str(staging))
        trainer.processing_class.save_pretrained(str(staging))
        install_staged(staging, output_dir, "--output-dir", command)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def build_trainer(
    model_dir: str | Path,
    pairs: list[dict],
    output_dir: str | Path,
    *,
    beta: float = FDPO_BETA,
    factuality_lambda: float = FDPO_LAMBDA,
    learning_rate: float = 5e-7,
    epochs: float = 1.0,
    batch_size: int = 8,
    max_length: int | None = 2048,
    seed: int = 0,
) -> FDPOTrainer:
    """The :class:`FDPOTrainer` ``fspo fdpo train`` runs: ``model_dir`` (float32) on ``pairs``, checkpoints off."""
    tokenizer = load_tokenizer(str(model_dir))
    model = from_pretrained_checked(
        AutoModelForCausalLM,
        str(model_dir),
        positions_needed=max_length,
        needed_for=f"--max-length {max_length}",
        dtype=torch.float32,
    )
    config = DPOConfig(
        output_dir=str(output_dir),
        beta=beta,
        loss_type=["sigmoid"],
        precompute_ref_log_probs=True,
        learning_rate=learning_rate,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        max_length=max_length,
        seed=seed,
        save_strategy="no",
        report_to=[],
        logging_steps=1,
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available(),
    )
    return FDPOTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(pairs),
        processing_class=tokenizer,
        factuality_lambda=factuality_lambda,
    )
