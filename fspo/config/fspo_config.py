"""The ``fspo:`` block of a training config, typed: what FSPO does on top of verl's trainer.

``fspo/config/fspo_trainer.yaml`` lists every key with the default given here (so that a Hydra
override needs no ``+``); the defaults and each key's meaning live in this file only. The driver
converts the block once before Ray starts (:func:`fspo_config`, called by ``fspo.training.config_checks.validate``), so a
wrong type or value stops the run with one line naming the key; verl's trainer and reward workers
receive the ``DictConfig`` and convert it again in their own processes, as verl does with its own
config dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from verl.base_config import BaseConfig

from fspo.config.convert import to_dataclass
from fspo.config.numeric_options import FSPO_NUMBERS, check_numbers
from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import OUTSIDE_LABELS, REWARD_MODES, ConfigError

# A right answer's reward minus a wrong one's in modes knowrl and fapo (fspo.methods.reward_modes).
RIGHT_WRONG_GAP = 1.0


@dataclass
class FSPOConfig(BaseConfig):
    """The ``fspo:`` block (``_target_: fspo.config.fspo_config.FSPOConfig``); see each field's ``help``."""

    enable: bool = field(
        default=True, metadata={"help": "Master switch. false = the verl run is untouched (outcome reward only)."}
    )
    flip: bool = field(
        default=True,
        metadata={
            "help": "Flip each labelled token's advantage to its label's sign (the FSPO update; mode fspo only). With "
            "flip=false and step_reward_weight > 0 this is the paper's 'GRPO w/ factuality in the reward' ablation."
        },
    )
    step_reward_weight: float = field(
        default=0.0,
        metadata={"help": "Adds weight x the mean step label of a training rollout to its outcome reward (0 = off)."},
    )
    mode: str = field(
        default="fspo",
        metadata={
            "help": "How step verdicts enter training: fspo (the advantage flip below), knowrl (KnowRL's reward: right "
            "1, refusal 2/3, wrong 0, and its factuality reward for a wrong answer, fspo.methods.knowrl), fapo (FAPO's flawed-positive penalty, fspo.methods.fapo). "
            "knowrl and fapo are sequence-level rewards: no token is flipped."
        },
    )
    knowrl_fact_weight: float = field(
        default=1.0 / 3.0,  # fspo.methods.knowrl says why
        metadata={
            "help": "mode knowrl: the weight of the factuality reward (share of supported steps x FActScore's length "
            "penalty; see knowrl_wrong_answers_only for which answers gain it). 1/3 = KnowRL's weight 1 over its correctness gap of 3 (+2 right, -1 wrong), on 0-1 scores; "
            "at most 1, so that no wrong answer scores above a right one."
        },
    )
    knowrl_length_gamma: float = field(
        default=10.0,
        metadata={
            "help": "mode knowrl: FActScore's length penalty exp(1 - gamma/n) for n <= gamma judged steps. A repeated "
            "step counts once, as FActScore counts a fact (KnowRL: 10 atomic facts; 0 = off)."
        },
    )
    knowrl_wrong_answers_only: bool = field(
        default=True,
        metadata={
            "help": "mode knowrl: add the factuality reward to wrong, non-refusing answers only, as KnowRL's released "
            "code (false: to every non-refusing answer, which no released version does)."
        },
    )
    fapo_penalty: float = field(
        default=0.5,  # fspo.methods.fapo.majority_guided_penalty()
        metadata={
            "help": "mode fapo: subtracted from a flawed positive's reward (right answer, an unsupported step). 0.5 = "
            "FAPO's 1.0 on its +-1 rewards, half the right-wrong gap; at most 1, so that a flawed positive never "
            "scores below a wrong answer."
        },
    )
    label_outside_reasoning: int = field(
        default=0,
        metadata={
            "help": "The label every token after the reasoning (the </think> tag and the answer) gets: 0 = none; 1 "
            "reproduces the released code, which makes a wrong answer's advantage positive (reproduction "
            "only)."
        },
    )
    skip_non_claims: Optional[bool] = field(
        default=None,
        metadata={
            "help": "Label 0 for steps that state no claim ('Let me think.', questions; fspo.steps.is_claim). null = "
            "on in mode knowrl (KnowRL's fact splitter drops non-factual lines) and in mode fapo (FAPO's GenRM reads "
            "every step but flags only a wrong one, and a step that states nothing cannot be wrong, while a verifier "
            "of support would call it unsupported and make a right answer a flawed positive), off in mode fspo."
        },
    )
    require_evidence: bool = field(
        default=False,
        metadata={
            "help": "Every row must have evidence: the run stops before Ray naming the file and its first rows without "
            "(false: they train as plain GRPO)."
        },
    )
    evidence_key: str = field(
        default="evidence",
        metadata={
            "help": "Where a row's evidence is: extra_info[key], else the top-level column key (`knowledge` in the "
            "released FSPO files)."
        },
    )
    scorer_timeout_s: float = field(
        default=10.0,
        metadata={
            "help": "Seconds one outcome-scorer call may take; past it the rollout scores 0 and counts in "
            "fspo/scorer_timeouts (each reward worker scores in one small process that is restarted then: "
            "math-verify can spin for minutes holding the GIL). 0 = no limit."
        },
    )
    rollout_poll_s: float = field(
        default=2.0,
        metadata={
            "help": "Seconds between the trainer's checks for a step's finished rollouts (verl 0.9.1's replay buffer "
            "checks every 2 s and has no option for it). Each check lists the TransferQueue's keys; on a GPU a step's "
            "generation takes minutes, so 2 s costs nothing there. The CPU preset sets 0.25: a tiny run's generation "
            "took 4.0 s at every step with 2-s checks, 2.6-3.3 s with 0.25-s ones."
        },
    )
    skip_dead_steps: bool = field(
        default=False,
        metadata={
            "help": "Skip the forward and backward of an update whose every advantage is 0 (the CPU preset: true). "
            "Every group's rewards are equal then (the flip keeps 0) and the gradient is exactly 0: the CPU engine sets "
            "it so and AdamW steps as after the full pass (same weights, bit for bit); the old-policy and reference "
            "passes are skipped, fspo/step_skipped logged. CPU platform only; needs an estimator of the rewards alone "
            "(grpo, rloo, ...), no critic, no KL, entropy_coeff 0 (the log says which)."
        },
    )
    dump_dir: Optional[str] = field(
        default=None,
        metadata={
            "help": "Save each actor update's batch (advantages before and after the flip, labels, response mask, "
            "verl's pad rows) under this directory as step_<N>.pt (step_<N>_<k>.pt when a step makes "
            "parameter_sync_step updates); null = off."
        },
    )
    verifier: VerifierConfig = field(
        default_factory=VerifierConfig, metadata={"help": "The step verifier (fspo.config.verifier.VerifierConfig)."}
    )

    @property
    def claims_only(self) -> bool:
        """Whether steps that state no claim go unjudged: ``skip_non_claims``, or by default modes knowrl and fapo."""
        if self.skip_non_claims is None:
            return self.mode in ("knowrl", "fapo")
        return self.skip_non_claims

    @property
    def flips(self) -> bool:
        """Whether the trainer flips advantages: mode fspo with flip on."""
        return self.mode == "fspo" and self.flip

    def __post_init__(self):
        if self.mode not in REWARD_MODES:
            raise ConfigError(f"fspo.mode must be one of {', '.join(REWARD_MODES)}, got {self.mode!r}")
        if self.mode != "fspo" and self.step_reward_weight:
            raise ConfigError(
                f"fspo.step_reward_weight is the fspo mode's ablation; with fspo.mode={self.mode} set it to 0"
            )
        # Ranges and dtypes (float32 for the reward terms) are declared once, in fspo.config.numeric_options.
        check_numbers(self, FSPO_NUMBERS, "fspo", ConfigError)
        for name in ("knowrl_fact_weight", "fapo_penalty"):
            if getattr(self, name) > RIGHT_WRONG_GAP:
                raise ConfigError(
                    f"fspo.{name} must be at most {RIGHT_WRONG_GAP:g} (the gap between a right and a wrong answer's "
                    f"reward), got {getattr(self, name)!r}: above it a wrong answer can outscore a right one"
                )
        if self.label_outside_reasoning not in OUTSIDE_LABELS:
            raise ConfigError(
                f"fspo.label_outside_reasoning must be 0 (off), 1 or -1 (a label), got {self.label_outside_reasoning!r}"
            )
        if not self.evidence_key:
            raise ConfigError("fspo.evidence_key must name a column or extra_info key, got an empty string")


def fspo_config(config: Optional[Mapping]) -> FSPOConfig:
    """The ``fspo:`` block of a run's ``config`` as an :class:`FSPOConfig` (its defaults when there is none).

    Raises:
        ConfigError: one line naming the key: a value of the wrong type or out of range, a key FSPO does not
            have.
    """
    return to_dataclass(config.get("fspo") if config is not None else None, FSPOConfig, "fspo")
