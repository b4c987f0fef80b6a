"""Dead steps of ``fspo quickstart``: how many training steps carry a gradient, measured without a trainer.

A GRPO group whose rollouts all earn the same reward has advantage 0 on every token, and FSPO's sign flip
of 0 is 0: a step whose groups are all such learns nothing. This script samples the untrained quickstart
model on the quickstart's training prompts exactly as its trainer does (plain transformers, no verl or Ray):
the prompts in the order verl draws them, the chat template, each rollout's sampling seed
(:func:`fspo.cpu.agent_loop.sample_seed`), the ``hf`` rollout's decoding (:func:`fspo.cpu.rollout.generate_batch`)
and the run's compute dtype. It scores every rollout with the project's outcome reward
(:func:`fspo.training.outcome.compute_score`) and reports, for each layout ``PROMPTS x GROUP`` of ``--layouts``
(prompts per step x rollouts per prompt, each sampled as a run with that layout would be),

- why rollouts score 0: no ``<answer>`` block and cut off at the length limit, no ``<answer>`` block though
  finished, or a wrong answer;
- the share of groups whose rewards are not all equal (live groups) and of steps with at least one live
  group (live steps), with a 95% Wilson interval, and the first live step.

Step 1's rollouts are the run's own, token for token (the quickstart, seed 0, bfloat16: 8 of 8). Later steps
are what the untrained model would sample; the run's own differ where its weights moved, which AdamW's weight
decay does even on a step without a gradient (step 2 after a dead step 1: 4 of 8 identical).

Usage (12 steps of 2 prompts x 4 rollouts: 3 minutes a layout on a busy 2-core machine):
    python benchmarks/dead_steps.py                           # the quickstart: seed 0, T 0.7, 96 tokens, 2x4
    python benchmarks/dead_steps.py --layouts 2x4,1x8,4x2 --temperature 1.0
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from fspo.training.outcome import compute_score, extract_answer

DATA_SOURCE = "synthetic_multihop"
Z95 = 1.959963984540054


def parse_layout(text: str) -> tuple[int, int]:
    """``"2x4"`` -> (2 prompts per step, 4 rollouts per prompt)."""
    prompts, _, group = text.partition("x")
    if not (prompts.isdigit() and group.isdigit()) or int(prompts) < 1 or int(group) < 2:
        raise argparse.ArgumentTypeError(
            f"a layout is PROMPTSxGROUP, at least 1 prompt and a group of 2 (e.g. 2x4), got {text!r}"
        )
    return int(prompts), int(group)


def is_live(rewards: Sequence[float]) -> bool:
    """Whether a group's GRPO advantage is non-zero somewhere: its rewards are not all equal (groups of 2 or more;
    verl gives a lone rollout its reward as advantage, which is no group comparison)."""
    return len(rewards) > 1 and max(rewards) != min(rewards)


def live_counts(rewards: Sequence[Sequence[float]], prompts_per_step: int, group: int) -> dict[str, int]:
    """Live groups and live steps when each prompt's first ``group`` rewards form its group and consecutive
    ``prompts_per_step`` prompts form a step (a trailing partial step is left out, as verl drops it)."""
    steps = len(rewards) // prompts_per_step
    groups = [list(prompt[:group]) for prompt in rewards[: steps * prompts_per_step]]
    live = [is_live(g) for g in groups]
    live_steps = sum(any(live[s * prompts_per_step : (s + 1) * prompts_per_step]) for s in range(steps))
    return {"groups": len(groups), "live_groups": sum(live), "steps": steps, "live_steps": live_steps}


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (0, 1 when there are no trials)."""
    if trials == 0:
        return 0.0, 1.0
    share = successes / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    # Rounding must not push the share itself out (8 of 8 gives 0.9999999999999998 for 1.0 otherwise).
    return max(0.0, min(share, centre - half)), min(1.0, max(share, centre + half))


def rollout_kind(response: str, finished: bool, reward: float) -> str:
    """Why a rollout earned what it did: ``scored`` (reward > 0), ``wrong`` (an answer, reward 0),
    ``no_answer_cut`` (no answer block, cut off at the length limit) or ``no_answer`` (none, though finished)."""
    if reward > 0:
        return "scored"
    if extract_answer(response) is not None:
        return "wrong"
    return "no_answer" if finished else "no_answer_cut"


def quickstart_setting(key: str) -> str:
    """The value the quickstart's trainer overrides give ``key`` (``fspo.quickstart.cli.run_overrides``)."""
    from fspo.quickstart.cli import run_overrides

    given = dict(o.split("=", 1) for o in run_overrides({"model": "", "train": "", "val": ""}, Path("."), 1))
    return given[key]


TEMPERATURE_KEY = "actor_rollout_ref.rollout.temperature"
PROMPT_LENGTH_KEY = "data.max_prompt_length"
RESPONSE_LENGTH_KEY = "data.max_response_length"


def training_rows(steps: int, prompts_per_step: int, seed: int, example_turn: bool = True) -> list[dict]:
    """The quickstart's training prompts of its first ``steps`` steps (seed ``seed``), in the order its trainer
    draws them."""
    from fspo.quickstart.cli import TRAIN_ROWS, quickstart_rows

    rows = quickstart_rows(TRAIN_ROWS, seed, "train", example_turn=example_turn)
    return [rows[index] for index in trainer_order_of(len(rows), seed)[: steps * prompts_per_step]]


def trainer_order_of(size: int, seed: int) -> list[int]:
    """The order verl 0.9.1 draws a shuffled train set in (verl.trainer.ppo.utils.create_rl_sampler: torchdata's
    RandomSampler with a generator seeded by ``data.seed``, which the quickstart sets to ``--seed``)."""
    import torch
    from torchdata.stateful_dataloader.sampler import RandomSampler

    generator = torch.Generator()
    generator.manual_seed(seed)
    return list(RandomSampler(data_source=range(size), generator=generator))


def sample_as_trainer(
    model,
    tokenizer,
    rows: Sequence[dict],
    prompts_per_step: int,
    group: int,
    run_seed: int,
    temperature: float,
    prompt_length: int,
    response_length: int,
    chat_template: str | None = None,
) -> list[list[tuple[str, bool]]]:
    """``group`` rollouts of each row, as a run whose steps take ``prompts_per_step`` consecutive rows samples
    them from ``model``: (text, finished before the limit) per rollout.

    verl's single-turn agent loop tokenises the messages with the chat template; the CPU preset's agent loop gives
    rollout k of a row at step s the seed ``sample_seed(rollout.seed, s, index, k, messages)``; the ``hf`` server
    decodes with :func:`fspo.cpu.rollout.generate_batch`, whose tokens do not depend on which requests share a batch.
    """
    from fspo.cpu.agent_loop import sample_seed
    from fspo.cpu.rollout import generate_batch, pad_token_id, sampling_settings, stop_token_ids

    stop_ids = stop_token_ids(model, tokenizer)
    pad_id = pad_token_id(tokenizer)
    result = []
    for number, row in enumerate(rows):
        messages = [dict(message) for message in row["prompt"]]
        ids = tokenizer.apply_chat_template(
            messages, chat_template=chat_template, add_generation_prompt=True, tokenize=True
        )
        ids = [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]
        params = {"temperature": temperature, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
        settings = sampling_settings(params, len(ids), prompt_length, response_length, prompt_length + response_length)
        step = number // prompts_per_step + 1
        index = row["extra_info"]["index"]
        seeds = [sample_seed(run_seed, step, index, k, row["prompt"]) for k in range(group)]
        outputs = generate_batch(model, [ids] * group, settings, pad_id, stop_ids, seeds)
        result.append(
            [
                (tokenizer.decode(tokens, skip_special_tokens=True), bool(stop_ids & set(tokens)))
                for tokens, _ in outputs
            ]
        )
        print(f"  prompt {number + 1}/{len(rows)} sampled", file=sys.stderr, flush=True)
    return result


def first_live_step(rewards: Sequence[Sequence[float]], prompts_per_step: int) -> int | None:
    """The 1-based number of the first step with a live group (None when there is none)."""
    for step in range(len(rewards) // prompts_per_step):
        if any(is_live(group) for group in rewards[step * prompts_per_step : (step + 1) * prompts_per_step]):
            return step + 1
    return None


def report(rows: list[dict], samples: list[list[tuple[str, bool]]], prompts_per_step: int, group: int) -> dict:
    """One layout's rollouts by kind, its live groups and steps with their intervals, and its first live step."""
    rewards, kinds = [], Counter()
    for row, responses in zip(rows, samples):
        truth = row["reward_model"]["ground_truth"]
        scores = [compute_score(DATA_SOURCE, text, truth)["score"] for text, _ in responses]
        kinds.update(rollout_kind(text, done, score) for (text, done), score in zip(responses, scores))
        rewards.append(scores)
    counts = live_counts(rewards, prompts_per_step, group)
    return {
        **counts,
        "group_interval": wilson(counts["live_groups"], counts["groups"]),
        "step_interval": wilson(counts["live_steps"], counts["steps"]),
        "first_live_step": first_live_step(rewards, prompts_per_step),
        "rollouts": dict(kinds),
        "rewards": rewards,
    }


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.cpu.compute import torch_compute_dtype
    from fspo.quickstart.cli import PROMPT_FORMAT
    from fspo.training.prompt_formats import chat_template

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the quickstart's)")
    parser.add_argument("--steps", type=int, default=12, help="training steps (the quickstart's 12)")
    parser.add_argument(
        "--seed", type=int, default=0, help="the quickstart's --seed: its questions, order and sampling"
    )
    parser.add_argument("--temperature", type=float, default=float(quickstart_setting(TEMPERATURE_KEY)))
    parser.add_argument("--max-new-tokens", type=int, default=int(quickstart_setting(RESPONSE_LENGTH_KEY)))
    parser.add_argument("--max-prompt-length", type=int, default=int(quickstart_setting(PROMPT_LENGTH_KEY)))
    parser.add_argument(
        "--example-in",
        choices=("turn", "system"),
        default="turn",
        help="where the prompt's worked example sits: a chat turn before the question (the quickstart's since issue 42) "
        "or inside the system message (before)",
    )
    parser.add_argument("--layouts", type=lambda text: [parse_layout(t) for t in text.split(",")], default="2x4")
    parser.add_argument("--json", type=Path, help="also write the figures (and every reward) here")
    args = parser.parse_args(argv)
    if args.model is None:
        from fspo.quickstart.smollm2 import convert_smollm2

        args.model = convert_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch_compute_dtype()).eval()
    setting = (
        f"seed {args.seed}, T={args.temperature}, {args.max_new_tokens} tokens, example in {args.example_in}, "
        f"{str(model.dtype).removeprefix('torch.')}"
    )
    figures = {}
    for prompts, group in args.layouts:
        started = time.time()
        rows = training_rows(args.steps, prompts, args.seed, args.example_in == "turn")
        samples = sample_as_trainer(
            model,
            tokenizer,
            rows,
            prompts,
            group,
            args.seed,
            args.temperature,
            args.max_prompt_length,
            args.max_new_tokens,
            chat_template(PROMPT_FORMAT),
        )
        c = figures[f"{prompts}x{group}"] = report(rows, samples, prompts, group)
        g, s = c["group_interval"], c["step_interval"]
        total = sum(c["rollouts"].values())
        print(f"{prompts}x{group} ({setting}; {time.time() - started:.0f} s):")
        print("  rollouts: " + ", ".join(f"{k} {v}/{total}" for k, v in sorted(c["rollouts"].items())))
        print(
            f"  live groups {c['live_groups']}/{c['groups']} [{g[0]:.2f}, {g[1]:.2f}]  "
            f"live steps {c['live_steps']}/{c['steps']} [{s[0]:.2f}, {s[1]:.2f}]  first live step {c['first_live_step']}"
        )
    if args.json:
        args.json.write_text(json.dumps({"setting": vars(args) | {"model": str(args.model)}, **figures}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
