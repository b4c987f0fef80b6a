"""Dead steps of ``fspo quickstart``: how many training steps carry a gradient, measured without a trainer.

A GRPO group whose rollouts all earn the same reward has advantage 0 on every token, and FSPO's sign flip
of 0 is 0: a step whose groups are all such learns nothing. This script samples the untrained quickstart
model (plain transformers, no verl or Ray) on the quickstart's training prompts at its sampling settings,
scores every rollout with the project's outcome reward (:func:`fspo.training.outcome.compute_score`), and
reports

- why rollouts score 0: no ``<answer>`` block and cut off at the length limit, no ``<answer>`` block though
  finished, or a wrong answer;
- the share of groups whose rewards are not all equal (live groups), and of steps with at least one live
  group (live steps), for each layout ``PROMPTS x GROUP`` of ``--layouts`` (each prompt's first GROUP
  rollouts; consecutive prompts make a step), with a 95% Wilson interval.

Not yet a faithful proxy of the trainer: with the example as a turn it found 3 of the first 4 steps live
(``--trainer-order``, seed 0), while ``fspo quickstart --seed 0`` scored every rollout of its first 6 steps 0
(issue 42; the gap is unexplained). Confirm a change with a trainer run.

One sampling pass serves every layout whose group fits ``--rollouts``. A candidate change of the sampling
(temperature, response length, where the worked example sits) is a separate invocation.

Usage (12 prompts x 8 rollouts: 13-15 minutes on one thread of a busy 2-core machine, most of it ``generate``):
    python benchmarks/dead_steps.py                           # the quickstart: example as a turn, 0.7, 96 tokens
    python benchmarks/dead_steps.py --example-in system       # the quickstart's prompt before issue 42
    python benchmarks/dead_steps.py --max-new-tokens 128 --layouts 2x3
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


def training_rows(count: int, seed: int, example_turn: bool, trainer_order: bool = False) -> list[dict]:
    """The first ``count`` training prompts of the quickstart's data for ``seed``: in the order they were made, or
    (``trainer_order``) in the order verl's trainer draws them, so proxy step k holds the run's step k prompts."""
    from fspo.quickstart.cli import TRAIN_ROWS, quickstart_rows

    if not trainer_order:
        return quickstart_rows(count, seed, "train", example_turn=example_turn)
    rows = quickstart_rows(TRAIN_ROWS, seed, "train", example_turn=example_turn)
    return [rows[index] for index in trainer_order_of(len(rows), seed)[:count]]


def trainer_order_of(size: int, seed: int) -> list[int]:
    """The order verl 0.9.1 draws a shuffled train set in (verl.trainer.ppo.utils.create_rl_sampler: torchdata's
    RandomSampler with a generator seeded by ``data.seed``, which the quickstart sets to ``--seed``)."""
    import torch
    from torchdata.stateful_dataloader.sampler import RandomSampler

    generator = torch.Generator()
    generator.manual_seed(seed)
    return list(RandomSampler(data_source=range(size), generator=generator))


def sample(
    model_dir: Path, rows: list[dict], rollouts: int, temperature: float, max_new_tokens: int, seed: int
) -> list[list[tuple[str, bool]]]:
    """``rollouts`` sampled responses per row as the quickstart prompts them: (text, finished before the limit)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.data.templates import render_prompt
    from fspo.quickstart.cli import PROMPT_FORMAT

    # One thread: on a shared 2-core machine two threads spin against other work (measured 13x slower).
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    result = []
    for number, row in enumerate(rows, 1):
        prompt = render_prompt(list(row["prompt"]), PROMPT_FORMAT, tokenizer)
        batch = tokenizer([prompt] * rollouts, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = out[:, batch["input_ids"].shape[1] :]
        finished = [bool((tokens == tokenizer.eos_token_id).any()) for tokens in new]
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        result.append(list(zip(texts, finished)))
        print(f"  prompt {number}/{len(rows)} sampled", file=sys.stderr, flush=True)
    return result


def report(rows: list[dict], samples: list[list[tuple[str, bool]]], layouts: list[tuple[int, int]]) -> dict:
    """The rollouts' kinds and, per layout, live groups and steps with their intervals."""
    rewards, kinds = [], Counter()
    for row, responses in zip(rows, samples):
        truth = row["reward_model"]["ground_truth"]
        scores = [compute_score(DATA_SOURCE, text, truth)["score"] for text, _ in responses]
        kinds.update(rollout_kind(text, done, score) for (text, done), score in zip(responses, scores))
        rewards.append(scores)
    figures = {"rollouts": dict(kinds), "layouts": {}}
    for prompts, group in layouts:
        counts = live_counts(rewards, prompts, group)
        counts["group_interval"] = wilson(counts["live_groups"], counts["groups"])
        counts["step_interval"] = wilson(counts["live_steps"], counts["steps"])
        figures["layouts"][f"{prompts}x{group}"] = counts
    figures["rewards"] = rewards
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the quickstart's)")
    parser.add_argument("--prompts", type=int, default=24, help="training prompts sampled")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts sampled per prompt")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument(
        "--example-in",
        choices=("turn", "system"),
        default="turn",
        help="where the prompt's worked example sits: a chat turn before the question (the quickstart's since issue 42) "
        "or inside the system message (before)",
    )
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic questions")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument(
        "--layouts", type=lambda text: [parse_layout(t) for t in text.split(",")], default="2x4,1x8,4x2"
    )
    parser.add_argument(
        "--trainer-order", action="store_true", help="the prompts in the order the quickstart's trainer draws them"
    )
    parser.add_argument("--json", type=Path, help="also write the figures (and every reward) here")
    args = parser.parse_args(argv)
    if any(group > args.rollouts for _, group in args.layouts):
        parser.error(f"every layout's group must fit --rollouts {args.rollouts}")
    if args.model is None:
        from fspo.quickstart.smollm2 import convert_smollm2

        args.model = convert_smollm2()
    started = time.time()
    rows = training_rows(args.prompts, args.data_seed, args.example_in == "turn", args.trainer_order)
    samples = sample(args.model, rows, args.rollouts, args.temperature, args.max_new_tokens, args.seed)
    figures = report(rows, samples, args.layouts)
    seconds = time.time() - started
    setting = (
        f"T={args.temperature} tokens={args.max_new_tokens} example in {args.example_in} "
        f"data_seed={args.data_seed} seed={args.seed}"
    )
    print(f"{setting}: {args.prompts} prompts x {args.rollouts} rollouts in {seconds:.0f} s")
    total = sum(figures["rollouts"].values())
    print("  rollouts: " + ", ".join(f"{k} {v}/{total}" for k, v in sorted(figures["rollouts"].items())))
    for name, c in figures["layouts"].items():
        g, s = c["group_interval"], c["step_interval"]
        print(
            f"  {name}: live groups {c['live_groups']}/{c['groups']} [{g[0]:.2f}, {g[1]:.2f}]  "
            f"live steps {c['live_steps']}/{c['steps']} [{s[0]:.2f}, {s[1]:.2f}]"
        )
    if args.json:
        args.json.write_text(json.dumps({"setting": vars(args) | {"model": str(args.model)}, **figures}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
