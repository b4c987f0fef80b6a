"""Steps a quickstart policy writes, labelled by the world judge: the training verifier measured where it trains.

``build`` makes the labelled set ``tests/data/judged_quickstart_steps.jsonl`` from one finished
``fspo quickstart`` run (``--run-dir``):

- the greedy validation answers before and after training (``<run>/fspo/validation/0.jsonl`` and the last);
- fresh answers to ``--questions`` new synthetic questions (split ``judged``, never trained or validated
  on), written greedily and at the training temperature (0.7) by the untrained model and by the trained
  policy (``<run>/fspo/merged``): more steps of the kind FSPO labels during training.

A run stopped early (no last validation, no merged model) gives what it has; the script says what it left out.
The committed file was built from a finished 12-step ``fspo quickstart --seed 0`` run: 277 judged steps,
207 of them written by the trained policy (validation after training, fresh greedy and sampled answers).

Each reasoning step the world judge (:mod:`fspo.data.world_judge`) calls supported (label 1) or
contradicted (label 0) is a row ``{evidence, claim, label, group, split, source}`` (steps that make no
claim are left out; a repeated (evidence, step) is kept once). ``split`` is ``calibration`` or
``heldout``, by a hash of the question (half each), so a threshold is chosen on one half and measured on
the other. The file is also a ``fspo verify --labelled FILE`` input.

``measure`` reports, on that file, each lexical unit (``whole``, ``sentence``) at the quickstart's
threshold and at the one calibrated on the calibration half: balanced accuracy and AUROC on the held-out
half; then the multi-fact steps of :mod:`fspo.verifier_tools.multi_fact`: the share of true chains each
unit calls unsupported (false alarms) and of swapped chains it calls supported (misses), per join.

Usage:
    fspo quickstart --output-dir /tmp/qs --seed 0
    python benchmarks/judged_steps.py build --run-dir /tmp/qs
    python benchmarks/judged_steps.py measure
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from fspo.config.verifier import verifier_config
from fspo.data.io import read_rows
from fspo.data.world_judge import CONTRADICTED, SUPPORTED, build_world, judge_step
from fspo.quickstart.cli import PROMPT_FORMAT, VERIFIER, quickstart_rows
from fspo.quickstart.step_report import validation_samples
from fspo.steps import reasoning_steps
from fspo.verifier_tools.labelled import is_heldout
from fspo.verifier_tools.multi_fact import multi_fact_steps
from fspo.verifier_tools.quality import auroc, balanced_accuracy, best_threshold
from fspo.verifiers import build_verifier

DEFAULT_FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "judged_quickstart_steps.jsonl"
HELDOUT_FRACTION = 0.5
TRAINING_TEMPERATURE = 0.7  # the quickstart's rollout temperature
MAX_NEW_TOKENS = 96  # the quickstart's response length


def judged_rows(samples: list[dict], source: str) -> list[dict]:
    """The claim steps of ``samples`` ({response, evidence, gold_facts, question}) as labelled rows."""
    rows = []
    for sample in samples:
        world = build_world(sample["evidence"], sample["gold_facts"])
        for step in reasoning_steps(sample["response"]):
            verdict = judge_step(step.text, world).verdict
            if verdict in (SUPPORTED, CONTRADICTED):
                group = sample["question"]
                rows.append(
                    {
                        "evidence": sample["evidence"],
                        "claim": step.text,
                        "label": int(verdict == SUPPORTED),
                        "group": group,
                        "split": "heldout" if is_heldout(group, fraction=HELDOUT_FRACTION) else "calibration",
                        "source": source,
                    }
                )
    return rows


def generate(model_dir: Path, rows: list[dict], temperature: float, seed: int, batch_size: int = 24) -> list[str]:
    """Each row's response from the model in ``model_dir`` (greedy at temperature 0), as the quickstart prompts it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.training.prompt_formats import render_prompt

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [render_prompt(list(row["prompt"]), PROMPT_FORMAT, tokenizer) for row in rows]
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature else {"do_sample": False}
    responses = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start : start + batch_size], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **batch, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=tokenizer.pad_token_id, **sampling
            )
        responses += tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return responses


def answer_samples(rows: list[dict], responses: list[str]) -> list[dict]:
    """Each row's response with what the world judge and the outcome scorer read of the row."""
    return [
        {
            "response": response,
            "evidence": row["extra_info"]["evidence"],
            "gold_facts": list(row["extra_info"]["gold_facts"]),
            "question": row["extra_info"]["question"],
            "ground_truth": row["reward_model"]["ground_truth"],
        }
        for row, response in zip(rows, responses)
    ]


def build(run_dir: Path, questions: int, output: Path, untrained: Path | None) -> int:
    """Labels the steps of every source the run has: a run stopped before its end (no last validation, no
    merged model) still gives its first validation and the untrained model's answers, and says what it lacks."""
    record = json.loads((run_dir / "quickstart_run.json").read_text())
    held_out = read_rows(run_dir / "data" / "test.parquet")
    by_evidence = {row["extra_info"]["evidence"]: row["extra_info"]["question"] for row in held_out}
    rows: list[dict] = []
    for when, step in (("before", 0), ("after", record["steps"])):
        dump = run_dir / "fspo" / "validation" / f"{step}.jsonl"
        if not dump.is_file():
            print(f"no {dump}: the run's validation {when} training is left out", file=sys.stderr)
            continue
        samples = validation_samples(dump, held_out)
        for sample in samples:
            sample["question"] = by_evidence[sample["evidence"]]
        rows += judged_rows(samples, f"validation-{when}")
    fresh = quickstart_rows(questions, record["seed"], "judged")
    trained = run_dir / "fspo" / "merged"
    models = [("untrained-greedy", untrained or Path(record["model"]), 0.0)]
    models.append(("untrained-sampled", untrained or Path(record["model"]), TRAINING_TEMPERATURE))
    if (trained / "config.json").is_file():
        models += [("trained-greedy", trained, 0.0), ("trained-sampled", trained, TRAINING_TEMPERATURE)]
    else:
        print(f"no trained model in {trained}: the trained policy's answers are left out", file=sys.stderr)
    for source, model_dir, temperature in models:
        started = time.time()
        responses = generate(model_dir, fresh, temperature, record["seed"])
        rows += judged_rows(answer_samples(fresh, responses), source)
        print(f"{source}: {len(fresh)} answers in {time.time() - started:.0f} s", file=sys.stderr)
    unique = list({(row["evidence"], row["claim"]): row for row in reversed(rows)}.values())[::-1]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(json.dumps(row) + "\n" for row in unique))
    counts = defaultdict(lambda: [0, 0])
    for row in unique:
        counts[row["source"]][row["label"]] += 1
    for source, (contradicted, supported) in counts.items():
        print(f"{source}: {supported} supported, {contradicted} contradicted steps")
    print(f"{len(unique)} rows -> {output} ({output.stat().st_size / 1000:.0f} kB)")
    return 0


def score_rows(rows: list[dict], evidence_unit: str) -> list[float]:
    verifier = build_verifier(verifier_config({**VERIFIER, "evidence_unit": evidence_unit}))
    return verifier.score([(row["evidence"], row["claim"]) for row in rows])


def unit_figures(rows: list[dict], evidence_unit: str) -> dict:
    """Held-out balanced accuracy at the quickstart threshold and at the calibration half's, and AUROC."""
    scores = score_rows(rows, evidence_unit)
    halves = {
        split: [(s, r["label"]) for s, r in zip(scores, rows) if r["split"] == split]
        for split in ("calibration", "heldout")
    }
    calibrated, _ = best_threshold(*zip(*halves["calibration"]))
    heldout_scores, heldout_labels = zip(*halves["heldout"])
    return {
        "heldout_steps": len(heldout_labels),
        "heldout_contradicted": heldout_labels.count(0),
        "balanced_accuracy": balanced_accuracy(heldout_scores, heldout_labels, VERIFIER["threshold"]),
        "calibrated_threshold": calibrated,
        "balanced_accuracy_calibrated": balanced_accuracy(heldout_scores, heldout_labels, calibrated),
        "auroc": auroc(heldout_scores, heldout_labels),
    }


def multi_fact_figures(evidence_unit: str, worlds: int) -> dict[str, dict]:
    """Per join: false alarms (true chains below the threshold) and misses (swapped chains at or above it)."""
    steps = multi_fact_steps(worlds)
    verifier = build_verifier(verifier_config({**VERIFIER, "evidence_unit": evidence_unit}))
    scores = verifier.score([(step.evidence, step.step) for step in steps])
    figures: dict[str, dict] = defaultdict(lambda: {"true": 0, "false_alarms": 0, "swapped": 0, "misses": 0})
    for step, score in zip(steps, scores):
        entry = figures[step.join]
        supported = score >= VERIFIER["threshold"]
        if step.label:
            entry["true"] += 1
            entry["false_alarms"] += not supported
        else:
            entry["swapped"] += 1
            entry["misses"] += supported
    return dict(figures)


def measure(path: Path, worlds: int) -> int:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(f"{path.name}: {len(rows)} judged steps; the quickstart's verifier: {VERIFIER}")
    print(
        "| evidence unit | held-out steps (contradicted) | balanced acc. at the quickstart's threshold | AUROC "
        "| threshold calibrated on the other half | balanced acc. there |"
    )
    print("|---|---|---|---|---|---|")
    for unit in ("whole", "sentence"):
        f = unit_figures(rows, unit)
        print(
            f"| `{unit}` | {f['heldout_steps']} ({f['heldout_contradicted']}) | {f['balanced_accuracy']:.3f} "
            f"| {f['auroc']:.3f} | {f['calibrated_threshold']:.3f} | {f['balanced_accuracy_calibrated']:.3f} |"
        )
    print(f"\nMulti-fact steps over {worlds} synthetic worlds (false alarms / true chains, misses / swapped chains):")
    print("| join | `whole` false alarms | `whole` misses | `sentence` false alarms | `sentence` misses |")
    print("|---|---|---|---|---|")
    by_unit = {unit: multi_fact_figures(unit, worlds) for unit in ("whole", "sentence")}
    for join in by_unit["whole"]:
        cells = []
        for unit in ("whole", "sentence"):
            e = by_unit[unit][join]
            cells += [f"{e['false_alarms']}/{e['true']}", f"{e['misses']}/{e['swapped']}"]
        print(f"| {join} | " + " | ".join(cells) + " |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="label the steps of a finished quickstart run")
    make.add_argument("--run-dir", type=Path, required=True, help="the --output-dir of `fspo quickstart`")
    make.add_argument("--questions", type=int, default=64, help="fresh questions each model answers (default 64)")
    make.add_argument("--untrained", type=Path, help="the untrained model (default: the run's --model)")
    make.add_argument("--output", type=Path, default=DEFAULT_FILE)
    check = commands.add_parser("measure", help="the lexical units on the labelled steps and on multi-fact steps")
    check.add_argument("--file", type=Path, default=DEFAULT_FILE)
    check.add_argument("--worlds", type=int, default=500, help="synthetic worlds of multi-fact steps (default 500)")
    args = parser.parse_args()
    if args.command == "build":
        return build(args.run_dir, args.questions, args.output, args.untrained)
    return measure(args.file, args.worlds)


if __name__ == "__main__":
    sys.exit(main())
