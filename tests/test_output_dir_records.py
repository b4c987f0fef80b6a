"""No command deletes or changes a file outside its output folder, whatever the folder's record says
(fspo/utils/output_dir.py: record_entries, remove_output, move_into).

The record (``.fspo-outputs.json``) is a file in the user's folder: anyone may edit it, and a folder it lists
may since have become a link. Generated here: entries that climb out (``../x``), absolute paths, links swapped
in for listed files and folders (to the outside, to another link), links inside a listed folder, Unicode names,
NUL and lone surrogates; then every way fspo deletes or replaces files in an output folder runs on it: a real
command (``fspo data synthetic``), the install a training run's or a merge's output goes through (``fspo
verifier train``, ``fspo fdpo train``, ``scripts/merge_checkpoint.sh``'s ``python -m fspo.utils.output_dir install``)
and quickstart's ``--fresh``.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo.cli import main as fspo_main
from fspo.quickstart.cli import clear_previous_run
from fspo.utils.output_dir import LOCK, RECORD, OutputConflict, install_staged, release_output_folders, staging_folder
from fspo.utils.output_dir import main as output_dir_main
from fspo_testing.command_guard import snapshot

# Placeholders the test resolves against its scratch folder: an absolute path to a victim outside the folder.
ABSOLUTE = ("@abs-victim", "@abs-outside/")
ESCAPES = ("../outside/victim.txt", "a/../../outside/victim.txt", "../outside/", "./../outside/dir/inner.txt", "..")
ODD = ("", ".", "/", "a\x00b", "\ud800", "a//b", "trailing/")
NAME = st.one_of(
    st.sampled_from(["fspo", "ckpt", "merged", "config.json", "lora_adapter", "train.parquet", "é", "e\u0301"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=6),
)
RELATIVE = st.lists(NAME, min_size=1, max_size=3).map("/".join)
ENTRY = st.one_of(RELATIVE, RELATIVE.map(lambda p: p + "/"), st.sampled_from(ESCAPES + ABSOLUTE), st.sampled_from(ODD))
# What is put on disk at a listed path (or the folder above it): fspo's file or folder, or a link swapped in.
ON_DISK = ("file", "folder", "link-to-victim", "link-to-outside", "link-to-link", "folder-holding-link", "nothing")
COMMANDS = ("fspo verifier train", "fspo fdpo train", "merge_checkpoint.sh", "fspo data synthetic", "quickstart")


def resolve(entry: str, scratch: Path) -> str:
    return {"@abs-victim": str(scratch / "outside" / "victim.txt"), "@abs-outside/": f"{scratch / 'outside'}/"}.get(
        entry, entry
    )


def build_outside(scratch: Path) -> Path:
    outside = scratch / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "victim.txt").write_text("the user's file")
    (outside / "dir" / "inner.txt").write_text("the user's other file")
    (outside / "link-to-victim").symlink_to(outside / "victim.txt")
    return outside


def put(out: Path, entry: str, what: str, outside: Path) -> None:
    """Make ``entry`` (inside ``out``) what the case says; an entry that cannot be made is left as it is."""
    path = out / entry.rstrip("/")
    with contextlib.suppress(OSError, ValueError, UnicodeEncodeError):
        if not path.resolve().is_relative_to(out.resolve()) or path.resolve() == out.resolve():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "file":
            path.write_text("fspo's earlier output")
        elif what == "folder":
            (path / "shard.bin").parent.mkdir(parents=True, exist_ok=True)
            (path / "shard.bin").write_text("fspo's earlier shard")
        elif what == "link-to-victim":
            path.symlink_to(outside / "victim.txt")
        elif what == "link-to-outside":
            path.symlink_to(outside / "dir", target_is_directory=True)
        elif what == "link-to-link":
            path.symlink_to(outside / "link-to-victim")
        elif what == "folder-holding-link":
            path.mkdir(parents=True, exist_ok=True)
            (path / "inner").symlink_to(outside / "dir", target_is_directory=True)


@st.composite
def tampered_folder(draw):
    """A record of generated entries, what is on disk at each, which command runs and what it stages."""
    entries = draw(st.lists(ENTRY, min_size=1, max_size=5, unique=True))
    on_disk = [draw(st.sampled_from(ON_DISK)) for _ in entries]
    command = draw(st.sampled_from(COMMANDS))
    staged = draw(st.lists(st.sampled_from(["config.json", "model.safetensors", "lora_adapter/a.bin"]), max_size=2))
    return entries, on_disk, command, staged


def write_record(out: Path, entries: list[str], command: str, scratch: Path) -> None:
    written = {resolve(entry, scratch): command for entry in entries}
    (out / RECORD).write_text(json.dumps({"written": written}, ensure_ascii=True), encoding="utf-8")


def run(command: str, out: Path, staged: list[str]) -> str | None:
    """The command's deletions and replacements in ``out``; the one line it refused with (None: it ran)."""
    err = io.StringIO()
    try:
        if command == "fspo data synthetic":
            argv = ["data", "synthetic", "--size", "2", "--test-size", "1", "--output-dir", str(out)]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                try:
                    status = fspo_main(argv)
                except SystemExit as exit_:  # argparse refused the option (output_option claims the folder)
                    status = exit_.code
        elif command == "quickstart":
            clear_previous_run(out)
            status = 0
        else:
            staging = staging_folder(out, command)
            for name in staged or ["config.json"]:
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).write_text(f"new {name}")
            if command == "merge_checkpoint.sh":  # the script's own step: python -m fspo.utils.output_dir install
                with contextlib.redirect_stderr(err):
                    status = output_dir_main(["install", f"--command={command}", str(staging), str(out)])
            else:
                install_staged(staging, out, "--output-dir", command)
                status = 0
    except OutputConflict as error:
        return str(error)
    finally:
        release_output_folders()
    if status:
        lines = [line for line in err.getvalue().splitlines() if line.strip() and not line.startswith(("usage:", " "))]
        assert len(lines) == 1, lines
        return lines[0]
    return None


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(case=tampered_folder())
def test_no_record_makes_a_command_touch_anything_outside_its_folder(case):
    """Property: whatever the record lists and whatever links were swapped in, every file, folder and link
    outside the output folder is as it was (links' targets included); a refusal is one line, leaves the folder
    as it was (the command's staging aside) and names the record, the entry or the link."""
    entries, on_disk, command, staged = case
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        outside = build_outside(scratch)
        out = scratch / "out"
        out.mkdir()
        for entry, what in zip(entries, on_disk):
            put(out, resolve(entry, scratch), what, outside)
        write_record(out, entries, command, scratch)
        outside_before, out_before = snapshot(outside), snapshot(out)
        refusal = run(command, out, staged)
        assert snapshot(outside) == outside_before, f"{command} changed a file outside {out} (refusal: {refusal})"
        assert not (out / LOCK).exists()  # the lock ends with the command
        if refusal is not None:
            assert "\n" not in refusal and (RECORD in refusal or "symbolic link" in refusal or "is a" in refusal)
            after = {k: v for k, v in snapshot(out).items() if ".fspo-staging-" not in k}
            assert after == out_before, f"{command} was refused ({refusal}) but changed {out}"


def test_the_cases_the_issue_names_are_refused_and_delete_nothing(tmp_path):
    """Was: ``../x`` or an absolute path in the record deleted that file (install, as ``fspo verifier train`` and
    ``fspo fdpo train`` use it, exit 0), and a listed folder since linked to the user's folder was deleted
    through (merge_checkpoint.sh's install), then NotADirectoryError with the new files already moved in."""
    outside = build_outside(tmp_path)
    for entry in ("../outside/victim.txt", str(outside / "victim.txt"), "lora_adapter/adapter.bin"):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        out.mkdir()
        (out / "lora_adapter").symlink_to(outside / "dir", target_is_directory=True)
        (outside / "dir" / "adapter.bin").write_text("the user's adapter")
        (out / RECORD).write_text(json.dumps({"written": {entry: "merge_checkpoint.sh"}}))
        before = snapshot(outside)
        refusal = run("merge_checkpoint.sh", out, ["config.json"])
        assert refusal is not None and json.dumps(entry) in refusal, refusal
        assert snapshot(outside) == before and not (out / "config.json").exists()


def test_a_record_entry_no_file_can_have_is_refused_before_anything_is_written(tmp_path):
    """An entry JSON escapes as an unpaired surrogate (``"\\ud800"``): the one JSON reader refuses such text, and
    the record that holds it is refused naming the record, as any entry that breaks the rule, not read as empty (then
    the command wrote into the folder and over the user's record)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD).write_text(
        json.dumps({"written": {"\ud800": "fspo data synthetic", "ok.txt": "fspo data synthetic"}})
    )
    before = snapshot(out)
    refusal = run("fspo data synthetic", out, [])
    assert refusal is not None and RECORD in refusal and "unpaired surrogate" in refusal, refusal
    assert snapshot(out) == before
