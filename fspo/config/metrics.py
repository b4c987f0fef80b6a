"""Every ``fspo/*`` metric the trainer logs, with what it means: the one list the docs' metrics table is made from.

The trainer logs them at each actor update (:func:`fspo.training.reward_extra_info.update_metrics` and
:meth:`fspo.training.trainer.FSPOAdvantageMixin._compute_advantage`); a test holds the names it logs equal to
these. The list lives in the config package, which imports nothing else from ``fspo``, so that the docs
generator (:mod:`fspo.config.reference`) and the trainer can both read it.
"""

from __future__ import annotations

METRICS = {
    # From the rollouts' reward_extra_info (fspo.training.reward_extra_info.step_metrics).
    "fspo/rollouts": "rollouts counted (not verl's pad rows; an agent run once)",
    "fspo/evidence_rollout_frac": "share of rollouts with evidence",
    "fspo/steps_per_response": "reasoning steps per rollout with evidence",
    "fspo/supported_step_rate": "supported share of the judged steps",
    "fspo/unverifiable_step_rate": "share of steps labelled 0: nothing to check, or the verifier failed on it",
    "fspo/unverifiable_rollout_rate": "share of rollouts with evidence left unlabelled: no closed reasoning, no "
    "steps, verifier failure",
    "fspo/verifier_failures": "rollouts whose verifier request failed",
    "fspo/verified_rollouts": "rollouts the verifier scored",
    "fspo/verifier_failed_steps": "steps the verifier failed on alone (an out-of-memory row, a NaN or ±inf output)",
    "fspo/verifier_failed_step_rollouts": "verified rollouts' failed-step shares, summed",
    "fspo/verifier_seconds": "mean wait of a rollout on the verifier",
    "fspo/verifier_ray_gpu_frac": "verified rollouts scored in a process Ray gave a GPU; absent when none",
    "fspo/step_reward_mean": "mean reward that `fspo.mode` or `step_reward_weight` adds",
    "fspo/scorer_timeouts": "rollouts whose outcome scorer passed `fspo.scorer_timeout_s` (scored 0)",
    "fspo/flawed_positive_rate": "share of right answers with an unsupported step",
    # The flip's, as shares of response tokens (fspo.advantage.flip_stats).
    "fspo/labelled_frac": "share of response tokens labelled",
    "fspo/supported_frac": "share labelled +1",
    "fspo/unsupported_frac": "share labelled -1",
    "fspo/flipped_frac": "share whose advantage the flip changed in sign",
    "fspo/flipped_to_negative_frac": "share flipped to negative",
    "fspo/flipped_to_positive_frac": "share flipped to positive",
    "fspo/labelled_responses_frac": "share of responses with a labelled token",
    # The trainer's own.
    "fspo/rejected_label_rows": "rows whose labels were missing or malformed (trained unlabelled)",
    "fspo/fapo_refinement_group_frac": "share of prompts whose fully correct rollouts outnumber the wrong ones",
    "fspo/step_skipped": "share of actor updates taken without forward and backward (`fspo.skip_dead_steps`)",
}
