"""The run-level guard against training on without the verifier: stop, never a silent switch to GRPO.

A rollout whose verifier request failed (every server dead or hung past the request's deadline, the backend
raising) gets no step labels, and its tokens train on the outcome advantage alone: plain GRPO. A few such
rollouts are noise; a run whose servers are gone for good (Ray's restarts spent, a broken node) would train
GRPO for days with only ``fspo/verifier_failures`` to show for it. A request can also be answered while
some of its pairs failed on their own (the server isolates them and scores them NaN: every long-evidence row
out of memory, a model that gives NaN or ±inf, a judge that gives no verdict); their steps get label 0 just the same. :class:`VerifierLossGuard`
watches each actor update's failed share of the rollouts that reached the verifier (rows without evidence or
without closed reasoning are not failures): a rollout whose request failed counts 1, a verified one the share
of its steps that failed (a step with nothing to check is a verdict, not a failure). It stops the run once that
share stays above ``fspo.verifier.max_failed_share`` for ``fspo.verifier.max_failed_steps`` updates in a row.

It stops rather than recreating the servers: the servers already get every recovery that can work in place
(a server whose process dies or whose device breaks is restarted by Ray up to ``SERVER_RESTARTS`` times,
clients retry within each request's deadline and look servers up again), so a loss that outlasts all of that
is a fault a fresh server in the same bundle would meet again (a lost node, a bad GPU, a model that no longer
loads, the GPU share taken). Restarting from the last checkpoint after fixing it is the cheaper week.
"""

from __future__ import annotations

from collections.abc import Mapping


class VerifierLossError(RuntimeError):
    """The verifier failed too many rollouts for too many updates in a row; the run stops."""


def failed_share(failed: float, verified: float, failed_in_verified: float = 0.0) -> float:
    """The failed share of the rollouts sent to the verifier (0 when none was sent).

    Args:
        failed: rollouts whose request failed (no step scored).
        verified: rollouts whose request was answered.
        failed_in_verified: the rollouts' worth of steps that failed on their own inside the verified ones
            (each verified rollout counts the share of its steps that failed).
    """
    sent = failed + verified
    return (failed + failed_in_verified) / sent if sent else 0.0


class VerifierLossGuard:
    """Counts the actor updates in a row whose verifier failure share passes ``max_share``; raises at ``max_steps``.

    Args:
        max_share: ``fspo.verifier.max_failed_share``.
        max_steps: ``fspo.verifier.max_failed_steps`` (0: never raises).
    """

    def __init__(self, max_share: float, max_steps: int):
        self.max_share = max_share
        self.max_steps = max_steps
        self.in_a_row = 0

    def observe(self, failed: float, verified: float, step: int | None = None, failed_in_verified: float = 0.0) -> None:
        """Take one actor update's counts (:func:`failed_share`'s arguments).

        Raises:
            VerifierLossError: the share passed ``max_share`` in ``max_steps`` updates in a row.
        """
        share = failed_share(failed, verified, failed_in_verified)
        self.in_a_row = self.in_a_row + 1 if share > self.max_share else 0
        if self.max_steps and self.in_a_row >= self.max_steps:
            at = f" (global step {step})" if step is not None else ""
            in_part = (
                f"; {round(failed_in_verified, 2):g} of them: steps it failed alone (out-of-memory rows, no verdict) "
                "in requests it answered, each rollout counting its share of failed steps"
                if failed_in_verified
                else ""
            )
            raise VerifierLossError(
                f"the step verifier failed {round(failed + failed_in_verified, 2):g} of {failed + verified:g} rollouts sent to "
                f"it ({share:.0%}{in_part}) in {self.in_a_row} actor update(s) in a row{at}, above "
                f"fspo.verifier.max_failed_share={self.max_share:g}: its servers are dead, hung or out of memory (see "
                "the 'fspo: verifier' warnings in the reward workers' logs), and training on would be plain GRPO. "
                "Fix the verifier and resume from the last checkpoint; fspo.verifier.max_failed_steps=0 lets the run "
                "go on unlabelled"
            )

    def observe_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """:meth:`observe` on an update's ``fspo/*`` metrics (``fspo/verifier_failures``, ``fspo/verified_rollouts``,
        ``fspo/verifier_failed_step_rollouts``)."""
        self.observe(
            float(metrics["fspo/verifier_failures"]),
            float(metrics["fspo/verified_rollouts"]),
            step,
            float(metrics["fspo/verifier_failed_step_rollouts"]),
        )
