"""The FSPO reward manager: outcome score plus per-token step labels for each rollout.

Loaded by verl's reward loop through config alone::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=FSPORewardManager
    reward.reward_manager.module.path=pkg://fspo.training.reward

For each finished rollout it

1. scores the outcome with the dataset's scorer (``reward.custom_reward_function``, by default
   :func:`fspo.training.outcome.compute_score`);
2. cuts the ``<think>`` reasoning into steps (:func:`fspo.steps.reasoning_steps`) and has the
   verifier score each step against the row's evidence; rollouts that reach the verifier together
   are verified in one batched call (:meth:`fspo.verifiers.Verifier.ascore_with_failures`; the pairs
   it failed on, a NaN or ±inf from its model included, are counted apart from those it legitimately could
   not judge);
3. lays the verdicts on the response tokens (:func:`fspo.token_labels.step_labels_for_response`) and
   returns them with the rollout's numbers in ``reward_extra_info`` (:mod:`fspo.training.reward_extra_info`),
   for :class:`fspo.training.trainer.FSPOTrainer` to apply after the advantage estimator.

An agent run that yields several outputs (turns) reaches the manager as one ``DataProto`` row per
output; verl scores the last. Each output with closed reasoning is labelled on its own tokens, and
the step counts cover all outputs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import os
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from fspo.config.fspo_config import fspo_config
from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import REWARD_ROUTER
from fspo.evidence import row_evidence
from fspo.methods.fapo import is_correct, is_flawed_positive, is_held_out, overlong_buffer
from fspo.methods.knowrl import is_refusal
from fspo.methods.reward_modes import added_reward, base_reward, judged_steps
from fspo.token_labels import step_labels_for_response, verdicts_from_scores
from fspo.training.outcome import METRIC_KEYS, extract_answer
from fspo.training.outcome import compute_score as fspo_score
from fspo.training.reward_extra_info import LABELS_KEY, RolloutStats, encode_outputs
from fspo.training.time_limit import TimeLimitedScorer, custom_scorer, default_scorer
from fspo.verifiers import build_verifier
from fspo.verifiers.base import fail_infinite

logger = logging.getLogger(__name__)


class MissingEvidenceError(ValueError):
    """A row without evidence under ``fspo.require_evidence=true``."""


def scorer_factory(config, compute_score) -> Optional[Callable]:
    """How the scorer's worker process rebuilds the outcome scorer, or None if it cannot.

    verl hands the reward manager the function it loaded from ``reward.custom_reward_function``; the worker
    loads the same one by path (a function from a file is not picklable).
    """
    if compute_score is None or compute_score is fspo_score:
        return default_scorer
    reward = config.get("reward") if isinstance(config, Mapping) else None
    custom = (reward or {}).get("custom_reward_function") or {}
    if custom.get("path") and custom.get("name"):
        kwargs = dict(custom.get("reward_kwargs") or {})
        return functools.partial(custom_scorer, str(custom["path"]), str(custom["name"]), kwargs)
    return None


def output_response_ids(item) -> list[int]:
    """The response token ids of one row of the ``DataProto`` verl's agent loop sends (padding cut off).

    verl pads the rows of a multi-output run to a common width and records each output's own length
    in ``response_len``; without it (a single output) the response's attention mask gives it.
    """
    responses = item.batch["responses"]
    length = item.non_tensor_batch.get("response_len")
    if length is None:
        length = int(item.batch["attention_mask"][-responses.shape[-1] :].sum())
    return responses[: int(length)].tolist()


def scorer_extra_info(non_tensor_batch: Mapping) -> dict:
    """The ``extra_info`` a scorer receives, completed as verl's naive reward manager completes it.

    A copy of the row's ``extra_info`` plus the agent run's ``tool_extra_fields``, ``num_turns``
    (from ``__num_turns__``) and ``rollout_reward_scores`` (from ``reward_scores``), so a custom
    scorer written for verl's managers reads the same keys under FSPO.
    """
    raw = non_tensor_batch.get("extra_info")
    extra_info = dict(raw) if isinstance(raw, Mapping) else {}  # a malformed row (NaN, a string) has none
    tool_extra_fields = non_tensor_batch.get("tool_extra_fields")
    if tool_extra_fields is not None:
        extra_info.update(tool_extra_fields.items())
    extra_info["num_turns"] = non_tensor_batch.get("__num_turns__")
    extra_info["rollout_reward_scores"] = non_tensor_batch.get("reward_scores", {})
    return extra_info


def _load_verifier(config: VerifierConfig, reward_router_address: Optional[str], reward_model_path: Optional[str]):
    """Build the reward worker's verifier; ``url: reward_router`` becomes verl's reward-model router."""
    if config.url == REWARD_ROUTER:
        if not reward_router_address:
            raise ValueError(
                "fspo.verifier.url=reward_router but verl started no reward-model router: set "
                "reward.reward_model.enable=true (and its model_path), or give fspo.verifier.url"
            )
        config = dataclasses.replace(
            config, url=f"http://{reward_router_address}", model=config.model or reward_model_path
        )
    verifier = build_verifier(config)
    if hasattr(verifier, "device"):  # a model loaded in this reward worker
        print(
            f"fspo: verifier {verifier.name} loaded in reward worker pid {os.getpid()} on {verifier.device}", flush=True
        )
    return verifier


class FSPORewardManager(RewardManagerBase):
    """verl reward manager that adds FSPO's step labels to the outcome reward (see module doc)."""

    def __init__(self, config, tokenizer, compute_score, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        compute_score = compute_score or fspo_score
        self.compute_score = compute_score
        self.is_async_score = inspect.iscoroutinefunction(compute_score)
        # The fspo block, converted in this reward worker from the config verl hands it.
        self.settings = fspo_config(config)
        self.limited_scorer, self._score_thread = None, None
        factory = scorer_factory(config, compute_score)
        if self.settings.scorer_timeout_s > 0 and not self.is_async_score:
            if factory is None:
                logger.warning(
                    "fspo: the outcome scorer cannot be rebuilt in a worker process; it runs with no time limit"
                )
            else:
                self.limited_scorer = TimeLimitedScorer(factory, timeout_s=self.settings.scorer_timeout_s)
                # One thread feeds the one scorer process, so waiting calls do not hold the shared executor.
                self._score_thread = ThreadPoolExecutor(1, thread_name_prefix="fspo-scorer")
        self._outcome_keys: tuple = METRIC_KEYS  # filled with 0 for a rollout whose scorer timed out
        self.overlong = overlong_buffer(config)  # verl's reward.reward_kwargs, as its dapo manager reads them
        self.verifier = None
        if self.settings.enable:
            reward_model = config.get("reward", {}).get("reward_model", {}) or {}
            self.verifier = _load_verifier(
                self.settings.verifier, reward_router_address, reward_model.get("model_path")
            )

    async def _outcome(self, data_source, response_str, ground_truth, extra_info) -> tuple[float, dict, bool]:
        """The scorer's (score, info, timed_out); a scorer past ``fspo.scorer_timeout_s`` scores 0."""
        kwargs = dict(
            data_source=data_source, solution_str=response_str, ground_truth=ground_truth, extra_info=extra_info
        )
        limit = self.settings.scorer_timeout_s or None
        try:
            if self.is_async_score:
                result = await asyncio.wait_for(self.compute_score(**kwargs), limit)
            elif self.limited_scorer is not None:
                call = functools.partial(self.limited_scorer, **kwargs)
                result = await asyncio.get_running_loop().run_in_executor(self._score_thread, call)
            else:
                result = await asyncio.get_running_loop().run_in_executor(None, lambda: self.compute_score(**kwargs))
        except TimeoutError as error:  # ScorerTimeout, asyncio's
            logger.warning(
                "fspo: the %s scorer gave no answer within %s s (%s); this rollout scores 0", data_source, limit, error
            )
            return 0.0, dict.fromkeys(self._outcome_keys, 0.0), True
        if isinstance(result, Mapping):
            self._outcome_keys = tuple(result)
            return float(result["score"]), dict(result), False
        self._outcome_keys = ("acc",)
        return float(result), {"acc": float(result)}, False

    async def run_single(self, data: DataProto) -> dict:
        outputs = [output_response_ids(data[i]) for i in range(len(data))]
        item = data[-1:][0]
        extra_info = scorer_extra_info(item.non_tensor_batch)
        data_source = item.non_tensor_batch["data_source"]
        ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]

        texts = await asyncio.get_running_loop().run_in_executor(
            None, lambda: [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
        )
        # As verl's managers: the outcome is the last output's (the run's final answer).
        score, outcome_info, timed_out = await self._outcome(data_source, texts[-1], ground_truth, extra_info)
        stats = RolloutStats(outcome_score=score, scorer_timeout=float(timed_out))
        labels = [[0] * len(ids) for ids in outputs]
        if self.settings.enable:
            evidence = row_evidence(item.non_tensor_batch, self.settings.evidence_key)
            labels = await self._label(list(zip(outputs, texts)), extra_info, data_source, stats, evidence)
        correct = is_correct(outcome_info, score)
        stats.correct = float(correct)
        stats.flawed_positive = float(is_flawed_positive(correct, stats.unsupported))
        reward = score
        held_out = is_held_out(extra_info)  # penalties and the factuality reward shape training rows only
        if self.settings.enable:
            refused = self.settings.mode == "knowrl" and is_refusal(extract_answer(texts[-1]))
            counts = (int(stats.supported), int(stats.unsupported))
            stats.step_reward = added_reward(self.settings, *counts, correct, refused, held_out)
            reward = base_reward(self.settings, score, correct, refused) + stats.step_reward
        info = {**outcome_info, **stats.as_info(), LABELS_KEY: encode_outputs(labels)}
        if self.overlong is not None:  # as verl's dapo manager: on the last output's length
            overlong = 0.0 if held_out else self.overlong.penalty(len(outputs[-1]))
            reward += overlong
            if self.overlong.log:
                info.update(overlong_reward=overlong, overlong=float(overlong < 0))
        return {"reward_score": reward, "reward_extra_info": info}

    async def _label(
        self, outputs: list[tuple[list[int], str]], extra_info, data_source, stats: RolloutStats, evidence: str
    ) -> list[list[int]]:
        """Token labels of each ``(response_ids, text)`` output of one agent run; fills ``stats``."""
        settings = self.settings
        unlabelled = [[0] * len(ids) for ids, _ in outputs]
        if not evidence:
            if settings.require_evidence:
                row = extra_info.get("index") if isinstance(extra_info, Mapping) else None
                split = extra_info.get("split") if isinstance(extra_info, Mapping) else None
                raise MissingEvidenceError(
                    f"fspo.require_evidence=true but the row index={row} split={split} data_source={data_source} "
                    f"has no evidence (extra_info.{settings.evidence_key} or a column {settings.evidence_key}); add evidence "
                    "to that row or set "
                    "fspo.require_evidence=false (evidence-less rows then train as plain GRPO)"
                )
            return unlabelled
        stats.has_evidence = 1.0
        steps = [judged_steps(settings, text) for _, text in outputs]
        stats.steps = float(sum(len(output_steps) for output_steps in steps))
        pairs = [(evidence, step.text) for output_steps in steps for step in output_steps]
        if not pairs:
            return unlabelled
        started = time.perf_counter()
        try:
            # Where scores enter labelling, from any backend or server: ±inf is a failed pair, never a label.
            scored = fail_infinite(await self.verifier.ascore_with_failures(pairs))
        except Exception as error:  # noqa: BLE001 - a verifier failure must not end the run
            warnings.warn(f"fspo: verifier failed, this rollout gets no step labels: {error!r}", stacklevel=1)
            stats.verifier_failed = 1.0
            return unlabelled
        stats.verifier_seconds = time.perf_counter() - started
        stats.verified = 1.0
        stats.verifier_ray_gpu = 1.0 if self.verifier.ray_gpu_assigned else 0.0
        stats.failed_steps = float(len(scored.failed))
        verdicts = verdicts_from_scores(scored.scores, self.verifier.threshold, self.verifier.strict_threshold)
        stats.supported = float(sum(v > 0 for v in verdicts))
        stats.unsupported = float(sum(v < 0 for v in verdicts))
        stats.unverifiable = float(sum(v == 0 for v in verdicts))
        labels, first = [], 0
        for (ids, text), output_steps in zip(outputs, steps):
            output_verdicts = verdicts[first : first + len(output_steps)]
            first += len(output_steps)
            labels.append(
                step_labels_for_response(
                    ids, self.tokenizer, text, output_steps, output_verdicts, settings.label_outside_reasoning
                )
                if output_steps
                else [0] * len(ids)
            )
        stats.labelled = 1.0 if any(any(output_labels) for output_labels in labels) else 0.0
        return labels
