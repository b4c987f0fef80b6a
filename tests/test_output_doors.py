"""The package's output doors: a file is written through :mod:`fspo.utils.atomic_file` (whole or not at all) into a
folder :mod:`fspo.utils.output_dir` claimed, or moved in as a set by it; no other module opens a file for writing.

A side door is found in the syntax tree of each module, as tests/test_input_doors.py finds the input side's:
``open``/``Path.open``/``os.fdopen`` with a writing mode, ``os.open`` with a writing flag, ``write_text``/
``write_bytes``, ``json.dump``/``pickle.dump``/``yaml.dump`` to a handle, ``torch.save``, ``numpy.save``,
``safetensors``' ``save_file``, parquet's ``write_table`` and pandas' ``to_parquet``/``to_csv``, ``savefig``,
``save_pretrained``/``save_model``, a rename or replace, ``shutil``'s copies and moves, ``os.truncate``, a link
made. :data:`SANCTIONED` lists, per module, each kind of door it may use and why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fspo

PACKAGE = Path(fspo.__file__).parent

WRITING_MODE = set("wax+")
WRITING_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
# Calls by their dotted name -> the kind of door.
CALLS = {
    "torch.save": "torch.save",
    "np.save": "numpy.save",
    "numpy.save": "numpy.save",
    "np.savez": "numpy.save",
    "save_file": "safetensors save_file",
    "safetensors.torch.save_file": "safetensors save_file",
    "pq.write_table": "write_table",
    "pyarrow.parquet.write_table": "write_table",
    "write_table": "write_table",
    "os.replace": "rename",
    "os.rename": "rename",
    "os.truncate": "truncate",
    "os.symlink": "link",
    "os.link": "link",
    "shutil.copy": "copy",
    "shutil.copy2": "copy",
    "shutil.copyfile": "copy",
    "shutil.copytree": "copy",
    "shutil.move": "copy",
}
# Methods by name -> the kind of door (any receiver: a Path, a figure, a model, a data frame).
METHODS = {
    "write_text": "write_text/write_bytes",
    "write_bytes": "write_text/write_bytes",
    "to_parquet": "pandas to_*",
    "to_csv": "pandas to_*",
    "savefig": "savefig",
    "save_pretrained": "save_pretrained/save_model",
    "save_model": "save_pretrained/save_model",
    "symlink_to": "link",
    "touch": "touch",
}
# Serialisers that write to their second argument, a handle.
DUMPS = {"json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump", "marshal.dump"}

# module -> {kind of door: why it is no side door}.
SANCTIONED = {
    "fspo.utils.atomic_file": {
        "rename": "the one replace of a finished temporary over its file (replacing)",
        "write_text/write_bytes": "write_text_atomically writes the temporary that replacing renames in",
    },
    "fspo.utils.output_dir": {
        "os.open for writing": "the folder's lock file (fcntl.flock), opened without following a link",
        "rename": "move_into and the set move: one name at a time, never through a link (the rule itself)",
        "copy": "a set staged on another file system is copied beside the folder before its renames",
    },
    "fspo.cli": {"os.open for writing": "standard output onto /dev/null after a broken pipe (no file)"},
    "fspo.data.io": {"write_table": "write_parquet writes the temporary of replacing"},
    "fspo.training.batch_dump": {"torch.save": "writes the temporary of replacing"},
    "fspo.evaluation.report": {"savefig": "the chart is saved to the temporary of replacing"},
    "fspo.verifier_tools.verify": {"savefig": "the chart is saved to the temporary of replacing"},
    "fspo.evaluation.pipeline": {
        "open for writing": "predictions are appended a record a line as they are made; the resume drops a line cut "
        "short (fspo.evaluation.records), so an interrupted run goes on where it stopped"
    },
    "fspo.evaluation.answer_judge": {
        "open for writing": "the judge's verdict cache, appended and resumed the same way"
    },
    "fspo.evaluation.records": {
        "truncate": "the resume cuts its own file's last line when an interrupted write left it"
    },
    "fspo.training.run_ledger": {"open for writing": "CI's ledger of trainer runs, a line appended per run"},
    "fspo.training.time_limit": {
        "os.fdopen for writing": "the scorer process's replies to its parent, on its standard output (no file)",
        "pickle dump": "the request to the scorer process, on its standard input (no file)",
    },
    "fspo.quickstart.launch": {"open for writing": "the trainer's log, its standard output, inside the run folder"},
    "fspo.quickstart.cli": {
        "open for writing": "the merger's log, its standard output, inside the run folder",
        "rename": "the merged model folder, from its staging beside it in the claimed run folder",
        "savefig": "the run's chart is saved to the temporary of replacing",
    },
    "fspo.quickstart.smollm2": {
        "save_pretrained/save_model": "SmolLM2 converted into a staging folder, renamed in when complete",
        "rename": "that staging folder renamed to the model folder",
    },
    "fspo.training.lora_fold": {"save_pretrained/save_model": "the folded model into the merge's staging folder"},
    "fspo.verifier_tools.finetune": {
        "save_pretrained/save_model": "the trained verifier into its staging folder, moved in as a set (install_staged)",
        "write_text/write_bytes": "training.json into the same staging folder",
    },
    "fspo.methods.fdpo.trainer": {
        "save_pretrained/save_model": "the trained policy into its staging folder, moved in as a set (install_staged)"
    },
    "fspo.config.reference": {"write_text/write_bytes": "the docs generator rewrites docs/configuration.md's tables"},
}


def _constant_text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    keyword = next((k.value for k in call.keywords if k.arg == "mode"), None)
    return keyword if keyword is not None else call.args[position] if len(call.args) > position else None


def _writes(mode: ast.AST | None) -> bool:
    """A mode that writes: one with w, a, x or +, or one the syntax tree cannot tell (not a constant)."""
    if mode is None:
        return False
    text = _constant_text(mode)
    return text is None or bool(WRITING_MODE & set(text))


def door_kind(call: ast.Call) -> str | None:
    """The kind of output door ``call`` is (None: it writes no file)."""
    name = ast.unparse(call.func)
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if name == "open":
        return "open for writing" if _writes(_mode(call, 1)) else None
    if name == "os.fdopen":
        return "os.fdopen for writing" if _writes(_mode(call, 1)) else None
    if name == "os.open":
        flags = (
            {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)} if len(call.args) > 1 else set()
        )
        return "os.open for writing" if flags & WRITING_FLAGS else None
    if method == "open":  # Path.open(mode)
        return "open for writing" if _writes(_mode(call, 0)) else None
    if name in DUMPS:
        return (
            f"{name.split('.')[0]} dump"
            if len(call.args) > 1 or any(k.arg == "stream" for k in call.keywords)
            else None
        )
    if name in CALLS:
        return CALLS[name]
    if method in METHODS:
        return METHODS[method]
    # Path.rename(target) / Path.replace(target): one argument (str.replace takes two, dataclasses.replace keywords).
    if method in ("rename", "replace") and len(call.args) == 1 and not call.keywords:
        return "rename"
    return None


def output_doors(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, kind)`` of each output door in ``tree``."""
    return [(node.lineno, kind) for node in ast.walk(tree) if isinstance(node, ast.Call) and (kind := door_kind(node))]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_doors() -> dict[str, list[tuple[int, str]]]:
    return {
        module_name(path): output_doors(ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_module_writes_a_file_around_the_output_doors():
    doors = package_doors()
    side = {
        module: [f"line {line}: {kind}" for line, kind in found if kind not in SANCTIONED.get(module, {})]
        for module, found in doors.items()
    }
    assert {module: found for module, found in side.items() if found} == {}


def test_every_sanctioned_door_is_still_used():
    """A sanction outlives its door otherwise: then a new door of that kind would pass unseen."""
    doors = package_doors()
    unused = {
        module: sorted(set(kinds) - {kind for _, kind in doors.get(module, [])}) for module, kinds in SANCTIONED.items()
    }
    assert {module: kinds for module, kinds in unused.items() if kinds} == {}


PLANTED = {
    "open 'w'": 'handle = open(path, "w")\n',
    "open 'a'": 'handle = open(path, "a", encoding="utf-8")\n',
    "open 'x'": 'handle = open(path, mode="x")\n',
    "open 'wb'": 'handle = open(path, "wb")\n',
    "open 'r+'": 'handle = open(path, "r+")\n',
    "open with a mode it cannot read": "handle = open(path, mode)\n",
    "Path.open('w')": 'handle = Path(path).open("w")\n',
    "os.fdopen 'w'": 'handle = os.fdopen(fd, "w")\n',
    "os.open O_CREAT": "fd = os.open(path, os.O_WRONLY | os.O_CREAT)\n",
    "write_text": 'Path(path).write_text("x")\n',
    "write_bytes": 'Path(path).write_bytes(b"x")\n',
    "pq.write_table": "pq.write_table(table, path)\n",
    "to_parquet": "frame.to_parquet(path)\n",
    "to_csv": "frame.to_csv(path)\n",
    "torch.save": "torch.save(state, path)\n",
    "numpy.save": "np.save(path, array)\n",
    "save_file": "save_file(tensors, path)\n",
    "json.dump to a handle": "json.dump(value, handle)\n",
    "pickle.dump to a handle": "pickle.dump(value, handle)\n",
    "yaml.safe_dump to a handle": "yaml.safe_dump(value, handle)\n",
    "savefig": "figure.savefig(path)\n",
    "save_pretrained": "model.save_pretrained(path)\n",
    "os.replace": "os.replace(source, path)\n",
    "Path.rename": "Path(source).rename(path)\n",
    "shutil.copy": "shutil.copy(source, path)\n",
    "os.truncate": "os.truncate(path, 0)\n",
    "symlink_to": "Path(path).symlink_to(target)\n",
}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_side_door_is_found(source):
    assert len(output_doors(ast.parse(source))) == 1


def test_reading_and_text_are_no_door():
    source = (
        'a = open(path)\nb = open(path, "rb")\nc = Path(path).open()\nd = json.dumps(value)\n'
        'e = yaml.safe_dump(value)\nf = text.replace("a", "b")\ng = dataclasses.replace(x, y=1)\n'
        "h = os.open(path, os.O_RDONLY | os.O_DIRECTORY)\n"
    )
    assert output_doors(ast.parse(source)) == []


# --- the read side of an output: a consumer refuses a cut-short record, only a resume drops one -------------------


def test_a_consumer_refuses_a_cut_short_last_record_and_a_resume_says_it_dropped_one(tmp_path, capsys):
    """Was: `fspo fdpo build-pairs` read evaluate's predictions with the resume rule and dropped a cut-short last
    record silently, building pairs from the records before it."""
    import json

    from fspo.cli import main as fspo_main
    from fspo.evaluation.records import read_records
    from fspo.utils.record_schemas import Prediction

    record = {"index": 0, "prompt": "Q?", "evidence": "E.", "responses": ["a", "b"], "sample_scores": [1.0, 0.0]}
    predictions = tmp_path / "predictions.jsonl"
    whole = json.dumps(record) + "\n"
    predictions.write_text(whole + whole.replace('"index": 0', '"index": 1')[:-9])
    pairs = tmp_path / "pairs.jsonl"
    argv = ["fdpo", "build-pairs", str(predictions), "--verifier", "lexical", "--pairs", str(pairs)]
    assert fspo_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{predictions}, line 2: not valid JSON" in err, err
    assert not pairs.exists()
    # evaluate resuming its own predictions drops that line, and says so
    assert [r["index"] for r in read_records(predictions, Prediction)] == [0]
    assert f"{predictions}, line 2 was cut short (an interrupted write): dropped" in capsys.readouterr().err


def predictions_text(count: int, cut_short: bool) -> str:
    """``count`` whole prediction records of `fspo evaluate`, one line each, then (``cut_short``) half of another."""
    import json

    from fspo.training.outcome import METRIC_KEYS

    record = {"index": 0, "prompt": "Q?", "responses": ["a"], "sample_scores": [1.0], **dict.fromkeys(METRIC_KEYS, 1.0)}
    lines = [json.dumps({**record, "index": index}) + "\n" for index in range(count + cut_short)]
    return "".join(lines)[: -9 if cut_short else None]


def test_a_report_refuses_a_cut_short_predictions_file_that_no_run_is_resuming(tmp_path, capsys):
    """fspo/evaluation/report.py: the results table reads every predictions file in the folder. Only the files the
    calling `fspo evaluate` resumed (its models on its benchmarks) may lose a cut-short last line; any other file is
    only reported, and refused in one line naming it, the line, and the run that resumes it. Was: dropped by all."""
    from fspo.evaluation.report import accumulated_results, results_from_predictions
    from fspo.utils.arguments import UsageError

    predictions = tmp_path / "predictions"
    predictions.mkdir()
    (predictions / "base__gsm8k.jsonl").write_text(predictions_text(2, cut_short=False))
    cut = predictions / "fspo__gsm8k.jsonl"
    cut.write_text(predictions_text(2, cut_short=True))
    for read in (lambda: results_from_predictions(predictions), lambda: accumulated_results(tmp_path, {"base": {}})):
        with pytest.raises(UsageError) as refused:
            read()
        message = str(refused.value)
        assert "\n" not in message and f"{cut}, line 3 was cut short by an interrupted `fspo evaluate`" in message
        assert "`fspo evaluate` of model fspo on benchmark gsm8k into this --output-dir again to resume it" in message
    # Resumed by the run that reports it: the drop is the resume, and it is said.
    results = accumulated_results(tmp_path, {"fspo": {"gsm8k": {"generated": 0}}})
    assert results["fspo"]["gsm8k"]["n"] == 2 and results["base"]["gsm8k"]["n"] == 2
    assert f"{cut}, line 3 was cut short (an interrupted write): dropped, resuming after it" in capsys.readouterr().err
    # A bad line before the last is no write cut short: refused by its reader's own line, resumed or not.
    cut.write_text(predictions_text(1, cut_short=True) + "\n" + predictions_text(1, cut_short=False))
    with pytest.raises(UsageError, match=r"line 2: not valid JSON") as refused:
        results_from_predictions(predictions)
    assert "cut short" not in str(refused.value)


def test_fspo_evaluate_refuses_a_cut_short_file_it_would_report_before_a_model_loads(tmp_path, capsys, monkeypatch):
    from fspo.cli import main as fspo_main
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo.evaluation import cli as evaluate_cli
    from fspo_testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    data = write_parquet(make_rows(1, seed=0, split="test"), tmp_path / "synth.parquet")
    out = tmp_path / "out"
    (out / "predictions").mkdir(parents=True)
    cut = out / "predictions" / "other__synth.jsonl"
    cut.write_text(predictions_text(1, cut_short=True))

    def no_model(*args, **kwargs):
        raise AssertionError("a model loaded before the refusal")

    monkeypatch.setattr(evaluate_cli, "build_generator", no_model)
    argv = ["evaluate", "--model", f"m={model}", "--data", str(data), "--output-dir", str(out), "--backend", "hf"]
    capsys.readouterr()  # the tiny model's save prints a progress bar where an earlier test turned them on
    assert fspo_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{cut}, line 2 was cut short" in err, err
    assert not (out / "results.md").exists()
