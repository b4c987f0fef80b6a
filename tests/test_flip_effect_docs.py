"""benchmarks/flip_effect_docs.py: the plan it stores runs for is the committed pre-registration's; no figure of the
plan before every seed is in; then the section shows `flip_effect.py --table` of the seeds verbatim, and
docs/results.md's section is what the committed files give."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("flip_effect_docs", ROOT / "benchmarks" / "flip_effect_docs.py")
flip_docs = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = flip_docs
_spec.loader.exec_module(flip_docs)
flip_effect = flip_docs.flip_effect
EARLIER = json.loads(flip_docs.EARLIER.read_text())


def test_the_plan_is_the_committed_preregistrations():
    text = (ROOT / "benchmarks" / "preregistration_flip_labels.md").read_text()
    command = re.search(r"python benchmarks/flip_effect.py (--model .*?)\n", text.replace("\\\n", "")).group(1)
    arguments = command.split("#")[0].split()
    seed_at = arguments.index("--seeds")
    assert arguments[seed_at + 1] == "S" and arguments[-2:] == ["--out", "S.json"]
    assert tuple(arguments[:seed_at] + arguments[seed_at + 2 : -2]) == flip_docs.PLAN_ARGUMENTS
    first, last = map(int, re.search(r"Repeats: seeds (\d+)–(\d+) × 3 batches", text).groups())
    assert flip_docs.PLAN_SEEDS == tuple(range(first, last + 1))


def _seed_file(seed: int, rng: random.Random) -> dict:
    """An --out file of the planned command for ``seed``, with random figures (3 batches)."""
    args = vars(flip_effect._parser().parse_args([*flip_docs.PLAN_ARGUMENTS, "--seeds", str(seed)]))
    repeats = []
    for _ in range(3):
        repeat = {}
        for batch in ("same", "fresh"):
            for group in flip_effect.GROUPS:
                grpo, spans = rng.gauss(0, 1), rng.randint(1, 9)
                for source in args["labels"]:
                    fspo = grpo + rng.gauss(-0.3, 1)
                    repeat[f"{source}/{batch}/{group}"] = {
                        "grpo": grpo, "fspo": fspo, "fspo_minus_grpo": fspo - grpo, "spans": spans,
                    }  # fmt: skip
        repeats.append(repeat)
    return {"args": args | {"out": f"{seed}.json"}, "repeats": repeats, "summary": flip_effect.summarise(repeats)}


def _run_dir(tmp_path: Path, seeds, figures: int = 0) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = random.Random(figures)
    for seed in seeds:
        (tmp_path / f"{seed}.json").write_text(json.dumps(_seed_file(seed, rng)))
    return tmp_path


def test_no_figure_of_the_plan_before_every_seed_is_in_then_the_table_and_the_decided_figures(tmp_path, capsys):
    run_dir = _run_dir(tmp_path / "run", flip_docs.PLAN_SEEDS)
    folder = tmp_path / "stored"
    (run_dir / "7.json").rename(run_dir / "7.json.part")  # the last seed still running
    assert len(flip_docs.store(run_dir, folder)) == 7
    text = flip_docs.section(flip_docs.stored_runs(folder), EARLIER)
    assert "Seeds stored: 7 of 8." in text and "decided" not in text
    assert flip_effect.markdown_table(flip_effect.merge_results([EARLIER])) in text  # the judge's, meanwhile

    (run_dir / "7.json.part").rename(run_dir / "7.json")
    assert len(flip_docs.store(run_dir, folder)) == 8  # the stored seven again, unchanged, and the eighth
    rerun = _run_dir(tmp_path / "rerun", [0], figures=1)
    with pytest.raises(ValueError, match="stored already"):  # seed 0 measured again, other figures: kept as it was
        flip_docs.store(rerun, folder)
    text = flip_docs.section(flip_docs.stored_runs(folder), EARLIER)
    files = [str(folder / f"seed{seed}.json") for seed in flip_docs.PLAN_SEEDS]
    assert flip_effect.main(["--table", *files]) == 0
    table, verdicts = capsys.readouterr().out.strip().split("\n\n")
    assert table in text and verdicts in text and "Seeds stored" not in text
    assert len(table.splitlines()) == 2 + 2 * len(flip_effect.GROUPS)
    assert len(verdicts.splitlines()) == len(flip_effect.DECIDED)


CHANGES = ["another learning rate", "one label source", "judge-only labels", "another seed", "a repeat fewer",
           "a span group missing"]  # fmt: skip


@pytest.mark.parametrize("change", CHANGES)
def test_a_file_the_plan_does_not_cover_is_refused_where_it_is_stored_and_where_it_is_read(tmp_path, change):
    run_dir = _run_dir(tmp_path / "run", [3])
    result = json.loads((run_dir / "3.json").read_text())
    args = result["args"]
    if change == "another learning rate":
        args["lr"] = 1e-4
    elif change == "one label source":
        args["labels"] = ["lexical"]
    elif change == "judge-only labels":
        args["labels"] = "judge"  # as files written before --labels took several sources
    elif change == "another seed":
        args["seeds"] = [4]
    elif change == "a repeat fewer":
        result["repeats"].pop()
    else:
        del result["repeats"][1][f"lexical/fresh/{flip_effect.RIGHT_ANSWER}"]
    (run_dir / "3.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match="not the plan's|repeats, not|every label source"):
        flip_docs.store(run_dir, tmp_path / "stored")
    stored = flip_docs.seed_path(3, tmp_path / "stored")
    stored.parent.mkdir()
    stored.write_text(json.dumps(result))
    with pytest.raises(ValueError, match="not the plan's|repeats, not|every label source"):
        flip_docs.stored_runs(tmp_path / "stored")


def test_a_seed_stored_under_another_name_or_twice_is_refused(tmp_path):
    folder = tmp_path / "stored"
    flip_docs.store(_run_dir(tmp_path / "run", [0, 1]), folder)
    (folder / "seed01.json").write_text((folder / "seed1.json").read_text())
    with pytest.raises(ValueError, match="not a seed file of the plan"):
        flip_docs.stored_runs(folder)
    (folder / "seed01.json").unlink()
    copied = json.loads((folder / "seed0.json").read_text())  # seed 0's repeats under seed 2's settings
    copied["args"]["seeds"] = [2]
    (folder / "seed2.json").write_text(json.dumps(copied))
    with pytest.raises(ValueError, match="also in seed0.json"):
        flip_docs.stored_runs(folder)
    with pytest.raises(ValueError, match="no such folder"):
        flip_docs.store(tmp_path / "no-such-run", folder)


@pytest.mark.parametrize("content", ["{", "[]", '{"args": {}, "repeats": []}', "\x00\xff"])
def test_a_malformed_stored_file_is_one_line(tmp_path, monkeypatch, capsys, content):
    (tmp_path / "seed2.json").write_text(content, encoding="latin-1")
    monkeypatch.setattr(flip_docs, "RUNS", tmp_path)
    assert flip_docs.main(["--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flip_effect_docs: ") and "seed2.json" in err


def test_the_finished_section_keeps_the_docs_within_their_budget(tmp_path):
    """The section grows when the last seed is stored: the page it is written into still fits the docs' budget."""
    from fspo_testing import docs_facts
    from fspo_testing.docs_pages import REPO, markdown_pages

    folder = tmp_path / "stored"
    flip_docs.store(_run_dir(tmp_path / "run", flip_docs.PLAN_SEEDS), folder)
    finished = flip_docs.written(flip_docs.RESULTS_MD.read_text(), flip_docs.stored_runs(folder), EARLIER)
    sizes = {page: (REPO / page).stat().st_size for page in markdown_pages()}
    sizes["docs/results.md"] = len(finished.encode())
    assert docs_facts.over_budget(sizes) == []


def test_a_page_without_the_sections_heading_is_one_line(tmp_path, monkeypatch, capsys):
    page = tmp_path / "results.md"
    page.write_text(flip_docs.RESULTS_MD.read_text().replace(flip_docs.SECTION, "## The flip"))
    monkeypatch.setattr(flip_docs, "RESULTS_MD", page)
    assert flip_docs.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flip_docs.SECTION in err and page.read_text().startswith("# Results")


def test_the_results_page_shows_what_the_committed_runs_give():
    assert flip_docs.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("uppers", "said"),
    [
        ({"judge": -0.1, "lexical": -0.1, "lexical-abstain": -0.1}, "the flip itself, whatever labels it follows"),
        ({"judge": 0.1, "lexical": -0.1, "lexical-abstain": 0.1}, "`lexical`'s labels"),
        ({"judge": 0.1, "lexical": 0.1, "lexical-abstain": 0.0}, None),
    ],
)
def test_the_answers_drop_is_read_from_the_table(uppers, said):
    """Whether the drop of a right answer comes with the flip or with `lexical`'s labels is read from the sources
    whose interval lies below 0, never written by hand."""
    summary = {
        f"{source}/fresh/{flip_effect.RIGHT_ANSWER}": {"upper": upper, "grpo": 0.3} for source, upper in uppers.items()
    }
    lines = flip_docs.answer_reading({"summary": summary})
    if said is None:
        assert lines == []
    else:
        assert lines[-1].endswith(f"comes with {said}.") and "which raises it" in lines[-1]
