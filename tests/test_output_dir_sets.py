"""Files of one result move into the output folder as a set (fspo/utils/output_dir.py: install_staged, output_set):
a process killed with SIGKILL at any point of the move leaves the earlier set or the new one, never a mix.

Each command that writes a set runs in a forked process, killed at each point the move can stop at (the points are
the labels the uncut run passes, :data:`fspo.utils.output_dir._SET_STEP`, not listed here): after the files are
written, after they moved to the set folder, after the journal, after each rename. Then, before the folder is
claimed again, a file the journal lists is refused by its readers; after the next claim the folder holds the old set
(killed before the journal) or the new one, and no staging, set folder or journal is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from fspo.cli import main as fspo_main
from fspo.utils import output_dir
from fspo.utils.input_files import InputFileError, read_jsonl, read_parquet, unfinished_set
from fspo.utils.output_dir import (
    JOURNAL,
    LOCK,
    RECORD,
    SET_PREFIX,
    STAGING_PREFIX,
    check_output_paths,
    claim_output_folder,
    output_set,
    release_output_folders,
)

GSM8K_ROWS = ({"question": "1+1?", "answer": "#### 2"}, {"question": "2+2?", "answer": "#### 4"})


def synthetic(folder: Path, version: int) -> None:
    argv = ["data", "synthetic", "--size", "3", "--test-size", "2", "--seed", str(version), "--output-dir", str(folder)]
    assert fspo_main(argv) == 0


def gsm8k(folder: Path, version: int) -> None:
    """Every `fspo data <builder>` writes its splits through builder.run_cli: gsm8k with both splits stands for them."""
    source = folder.parent / f"gsm8k-{version}"  # one file a split: one file never serves two
    source.mkdir(exist_ok=True)
    for split in ("train", "test"):
        (source / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in GSM8K_ROWS[: version + 1]))
    argv = ["data", "gsm8k", "--input", str(source), "--split", "train", "--split", "test", "--output-dir", str(folder)]
    assert fspo_main(argv) == 0


def evaluate_results(folder: Path, version: int) -> None:
    """`fspo evaluate`'s results files (fspo/evaluation/cli.py: write_results inside output_set)."""
    from fspo.evaluation.report import write_results

    names = [f"results.{suffix}" for suffix in ("md", "json", "csv", "png")]
    folder = check_output_paths("--output-dir", folder, names, "fspo evaluate")
    with output_set(folder, "--output-dir", "fspo evaluate") as staging:
        write_results({"model": {"gsm8k": {"score": 0.25 * (version + 1), "n": 4}}}, staging)


def quickstart_data(folder: Path, version: int) -> None:
    """`fspo quickstart`'s synthetic splits (fspo/quickstart/cli.py: prepare_data), written before its trainer starts
    (no trainer here): a smaller held-out split in the new set, so the old and new files differ in size too."""
    from fspo.quickstart.cli import prepare_data

    prepare_data(folder, seed=version, val_rows=4 - version)


def install(folder: Path, version: int) -> None:
    """The install `fspo verifier train`, `fspo fdpo train` and merge_checkpoint.sh move their model folder in with
    (``python -m fspo.utils.output_dir install``): the new set has fewer shards, the old ones are deleted with it."""
    files = ["config.json", "model-1.safetensors", "model-2.safetensors"] if version == 0 else ["config.json"]
    files += ["lora_adapter/adapter.bin", "model.safetensors"][version:]
    staging = folder.parent / f"staged-{version}"
    for name in files:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        (staging / name).write_text(f"{name} version {version}")
    assert output_dir.main(["install", "--command=merge_checkpoint.sh", str(staging), str(folder)]) == 0


SET_WRITERS: dict[str, Callable[[Path, int], None]] = {
    "fspo data synthetic": synthetic,
    "fspo data gsm8k": gsm8k,
    "fspo evaluate": evaluate_results,
    "fspo quickstart": quickstart_data,
    "install": install,
}
FOREIGN = (RECORD, LOCK, JOURNAL)


def state(folder: Path) -> dict[str, bytes]:
    """The outputs in ``folder``: every file but the record, the lock, a journal and staging or set folders."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and path.name not in FOREIGN
        and not path.relative_to(folder).parts[0].startswith((STAGING_PREFIX, SET_PREFIX))
    }


def leftovers(folder: Path) -> list[str]:
    return sorted(
        p.name for p in folder.iterdir() if p.name == JOURNAL or p.name.startswith((STAGING_PREFIX, SET_PREFIX))
    )


def run_forked(write: Callable[[Path, int], None], folder: Path, version: int, kill_at: int | None) -> list[str]:
    """``write(folder, version)`` in a forked process killed with SIGKILL at the ``kill_at``-th step of the set move
    (None: not killed); the step labels it passed."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            passed = []

            def step(label: str) -> None:
                passed.append(label)
                os.write(write_end, (label + "\n").encode())
                if len(passed) == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            output_dir._SET_STEP = step
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                write(folder, version)
            release_output_folders()
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as labels:
        passed = labels.read().splitlines()
    _, status = os.waitpid(pid, 0)
    expected = -signal.SIGKILL if kill_at is not None and kill_at <= len(passed) else 0
    assert os.waitstatus_to_exitcode(status) == expected, passed
    return passed


def readers_refuse(path: Path) -> bool:
    reader = read_parquet if path.suffix == ".parquet" else read_jsonl if path.suffix == ".jsonl" else None
    if reader is None:
        return unfinished_set(path) is not None
    try:
        reader(path)
    except InputFileError as error:
        return JOURNAL in str(error) and "\n" not in str(error)
    return False


@pytest.mark.parametrize("command", SET_WRITERS)
def test_a_kill_between_any_two_files_leaves_the_old_set_or_the_new_one(tmp_path, command):
    write = SET_WRITERS[command]
    (tmp_path / "warm").mkdir()
    with contextlib.redirect_stdout(None):
        write(tmp_path / "warm" / "out", 0)  # here, so that what it imports is not imported again in each fork
    release_output_folders()
    old_folder, new_folder = tmp_path / "old" / "out", tmp_path / "new" / "out"
    for folder in (old_folder, new_folder):
        folder.parent.mkdir()
        run_forked(write, folder, 0, None)
    old = state(old_folder)
    points = run_forked(write, new_folder, 1, None)
    new = state(new_folder)
    assert old != new and len(new) >= 2 and leftovers(new_folder) == []
    assert points[:3] == ["written", "staged", "journal written"] and len(points) == 3 + len(new)
    for kill_at in range(1, len(points) + 1):
        folder = tmp_path / f"killed-{kill_at}" / "out"
        folder.parent.mkdir()
        shutil.copytree(old_folder, folder, symlinks=True)
        run_forked(write, folder, 1, kill_at)
        where = (command, f"killed after {points[kill_at - 1]}")
        journal = (folder / JOURNAL).exists()
        if journal:  # the move is under way: every file it lists is refused by its readers until it is finished
            listed = json.loads((folder / JOURNAL).read_text())
            for relative in listed["files"] + listed["stale"]:
                assert readers_refuse(folder / relative), (*where, relative)
        else:
            assert state(folder) == old, where
        # What the refusal tells the user to run; any command claiming the folder does the same.
        assert output_dir.main(["finish", str(folder)]) == 0  # finishes the set, removes orphans
        assert state(folder) == (new if journal else old), where
        assert leftovers(folder) == [], where
        assert not any(unfinished_set(folder / relative) for relative in new)


def test_every_command_writing_several_files_is_killed_above():
    """Every command with an output option writes one file or moves its files in as a set through a case above:
    a new command fails here until it is given a case (or named as writing one file)."""
    from fspo.data.registry import DATASETS
    from fspo_testing.command_guard import command_paths, output_options

    one_file = {
        "fspo verify": "--chart: one PNG",
        "fspo fdpo build-pairs": "--pairs: one JSON Lines file",
    }
    through = {
        **{f"fspo data {name}": "fspo data gsm8k" for name in DATASETS},  # all builders run builder.run_cli
        "fspo data synthetic": "fspo data synthetic",
        "fspo evaluate": "fspo evaluate",
        "fspo verifier train": "install",  # finetune.py: install_staged
        "fspo fdpo train": "install",  # methods/fdpo/trainer.py: install_staged
        "fspo quickstart": "fspo quickstart",  # its data splits; its run folders are the trainer's, its chart one file
    }
    commands = {"fspo " + " ".join(leaf) for leaf in output_options(command_paths())}
    assert commands - one_file.keys() - through.keys() == set()
    assert {case for case in through.values() if case} <= SET_WRITERS.keys()


def test_a_journal_that_breaks_the_rule_moves_and_deletes_nothing(tmp_path):
    """The journal is a file in the user's folder, like the record: a set folder that is not fspo's, or a path out
    of the folder, is refused in one line naming the journal, and nothing moves."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("the user's file")
    for journal in (
        {"from": "../outside", "files": ["victim.txt"], "stale": [], "command": "x"},
        {"from": f"{SET_PREFIX}1", "files": [], "stale": ["../outside/victim.txt"], "command": "x"},
        {"from": f"{SET_PREFIX}1", "files": "victim.txt", "stale": [], "command": "x"},
    ):
        folder = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / JOURNAL).write_text(json.dumps(journal))
        with pytest.raises(output_dir.OutputConflict, match=JOURNAL) as refused:
            claim_output_folder("--output-dir", folder, "fspo data synthetic")
        assert "\n" not in str(refused.value)
        assert (outside / "victim.txt").read_text() == "the user's file" and (folder / JOURNAL).exists()
    assert not (folder / LOCK).exists()
