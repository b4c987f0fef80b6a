"""The one rule for every folder a command writes: it replaces or deletes only what fspo wrote there.

A command names the paths it will write inside its output folder (files, or folders ending in ``/`` whose
whole content is its own, such as a training run's checkpoints), and :func:`check_output_paths` refuses,
naming the path, when one of them is a file or folder fspo did not write, a symbolic link, or lies under a
file. What fspo wrote is listed in the folder's record, :data:`RECORD` (JSON, written atomically): a re-run
replaces its own earlier outputs, a user's file beside them is left alone. The output folder itself may be
a symbolic link to a folder (it is followed); a link inside it is never replaced nor written through.

    folder = check_output_paths("--output-dir", "out", ["results.md", "predictions/"], "fspo evaluate")
    ...write out/results.md, out/predictions/...
    # or, for files produced elsewhere first (a merge, save_pretrained): write them to staging_folder(folder)
    # then install_staged(staging, folder, "--target-dir", "merge_checkpoint.sh")

``python -m fspo.output_dir check|install ...`` does the same for scripts (scripts/merge_checkpoint.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from fspo.atomic_file import write_text_atomically
from fspo.cli.arguments import UsageError

RECORD = ".fspo-outputs.json"
STAGING_PREFIX = ".fspo-staging-"

# Kinds of what is at a path (lstat, links not followed); None: nothing there.
FILE, FOLDER, LINK, OTHER = "file", "folder", "link", "other"


class OutputConflict(UsageError):
    """A command would have to replace, delete or write through something fspo did not write."""


def _parts(path: str) -> tuple[str, ...]:
    return PurePosixPath(path.rstrip("/")).parts


def _check_relative(path: str) -> None:
    parts = _parts(path)
    if not parts or PurePosixPath(path).is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise OutputConflict(f"{path!r} would be written outside its output folder: name it without '..' or '/'")


def is_owned(path: str, owned: Iterable[str]) -> bool:
    """``path`` (a file, or a folder ending in ``/``) is listed in the record, or lies in a folder that is."""
    parts = _parts(path)
    for entry in owned:
        entry_parts = _parts(entry)
        if entry_parts == parts or (entry.endswith("/") and parts[: len(entry_parts)] == entry_parts):
            return True
    return False


def conflicts(planned: Iterable[str], present: Mapping[str, str], owned: Iterable[str]) -> list[tuple[str, str]]:
    """What stands in the way of writing ``planned`` (the pure core of :func:`check_output_paths`).

    Args:
        planned: Paths relative to the output folder the command will write: a file, or a folder ending in
            ``/`` whose whole content is the command's.
        present: What is at each planned path and at each folder above it: ``{relative path: kind}``, kind
            one of ``file``, ``folder``, ``link``, ``other`` (as ``os.lstat`` sees it); a missing key is a
            path where nothing is.
        owned: The entries of the folder's record (:data:`RECORD`).

    Returns:
        ``(path, why)`` for each obstacle, in planned order: a link at or above a planned path, a file or
        other non-folder above one, a folder where a file is planned, and a file or folder the record does
        not list (an empty folder is no obstacle: nothing in it can be lost).
    """
    owned = list(owned)
    found: list[tuple[str, str]] = []
    for path in planned:
        _check_relative(path)
        parts = _parts(path)
        problem = None
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            kind = present.get(above)
            if kind == LINK:
                problem = (above, "is a symbolic link: fspo writes nothing through a link inside its output folder")
            elif kind not in (None, FOLDER):
                problem = (above, f"is a {kind}, so {path.rstrip('/')} cannot be written under it")
            if problem:
                break
        target = "/".join(parts)
        kind = present.get(target)
        wants_folder = path.endswith("/")
        if problem is None and kind is not None:
            if kind == LINK:
                problem = (target, "is a symbolic link: fspo does not replace links")
            elif wants_folder and kind != FOLDER:
                problem = (target, f"is a {kind} where fspo writes a folder")
            elif not wants_folder and kind != FILE:
                problem = (target, f"is a {kind} where fspo writes a file")
            elif not is_owned(path, owned) and kind == FILE:
                problem = (target, "was not written by fspo")
            elif not is_owned(path, owned) and present.get(target + "/*") == "nonempty":
                problem = (target, "is a folder fspo did not write, and not empty")
        if problem and problem not in found:
            found.append(problem)
    return found


def read_record(folder: str | os.PathLike) -> list[str]:
    """The paths the folder's record lists as fspo's; [] when there is no record (or it is unreadable)."""
    record = Path(folder) / RECORD
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    written = data.get("written") if isinstance(data, dict) else None
    return [p for p in written if isinstance(p, str)] if isinstance(written, dict) else []


def _kind(path: Path) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a file above it is reported at its own level
    if stat.S_ISLNK(mode):
        return LINK
    if stat.S_ISDIR(mode):
        return FOLDER
    return FILE if stat.S_ISREG(mode) else OTHER


def survey(folder: Path, planned: Iterable[str]) -> dict[str, str]:
    """What is at each planned path and the folders above it, for :func:`conflicts`."""
    present: dict[str, str] = {}
    for path in planned:
        parts = _parts(path)
        for depth in range(1, len(parts) + 1):
            relative = "/".join(parts[:depth])
            kind = _kind(folder / relative)
            if kind is not None:
                present[relative] = kind
            if kind != FOLDER:
                break
            if depth == len(parts) and any(folder.joinpath(relative).iterdir()):
                present[relative + "/*"] = "nonempty"
    return present


def output_folder(flag: str, folder: str | os.PathLike) -> Path:
    """``folder`` with ``~`` expanded and a symbolic link followed; refused when it is a file, lies under a
    file, or cannot be written."""
    path = Path(os.path.expanduser(str(folder)))
    if path.is_symlink() and not path.exists():
        raise OutputConflict(f"{flag} {path} is a symbolic link to {os.readlink(path)}, which does not exist")
    path = path.resolve()
    if path.exists() and not path.is_dir():
        raise OutputConflict(f"{flag} {path} is a file, not a folder: give a folder to write into")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputConflict(f"{flag} {path}: {existing} is a file, so the folder cannot be created")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputConflict(f"{flag} {path}: {existing} is not writable by this user")
    return path


def check_output_paths(
    flag: str, folder: str | os.PathLike, planned: Iterable[str], command: str, record: bool = True
) -> Path:
    """THE check every command makes before it writes into its output folder (the rule of this module).

    Refuses (:class:`OutputConflict`, one line naming the path and the fix) when any of ``planned`` would
    replace, delete or write through something fspo did not write: a file or non-empty folder the folder's
    record does not list, a symbolic link, a file where a folder is needed. With ``record`` (the default) the
    planned paths are then added to the record, so a re-run (or a run that failed half way) may replace them.

    Args:
        flag: The option that named the folder (``--output-dir``), for the message.
        folder: The output folder; created if missing; a symbolic link to a folder is followed.
        planned: Relative paths the command will write: files, or folders ending in ``/`` that are wholly its own.
        command: Who writes them (``fspo evaluate``), kept in the record.

    Returns:
        The output folder, resolved (write under this path, not through the link).
    """
    planned = list(dict.fromkeys(planned))
    path = output_folder(flag, folder)
    owned = read_record(path) if path.is_dir() else []
    found = conflicts(planned, survey(path, planned) if path.is_dir() else {}, owned)
    if found:
        where, why = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise OutputConflict(
            f"{flag} {path}: {where} {why}{more}; fspo replaces only what it wrote there "
            f"(listed in {RECORD}): move it away or give another folder"
        )
    if record:
        record_outputs(path, planned, command)
    return path


def record_outputs(folder: Path, paths: Iterable[str], command: str) -> None:
    """Add ``paths`` to the folder's record as written by ``command`` (atomically; the folder is created)."""
    _write_record(folder, {**_record_entries(folder), **{p: command for p in paths}})


def forget_outputs(folder: Path, paths: Iterable[str]) -> None:
    """Drop ``paths`` from the folder's record (they were deleted by the command that wrote them)."""
    gone = set(paths)
    _write_record(folder, {p: c for p, c in _record_entries(folder).items() if p not in gone})


def _record_entries(folder: Path) -> dict[str, str]:
    try:
        data = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        written = data["written"]
        return {p: c for p, c in written.items() if isinstance(p, str) and isinstance(c, str)}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return {}


def _write_record(folder: Path, written: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"about": "files and folders (ending in /) fspo wrote here", "written": written}, indent=2)
    write_text_atomically(folder / RECORD, text + "\n")


def staging_folder(folder: Path, command: str) -> Path:
    """A fresh folder inside ``folder`` (same file system, so its files move in by rename) for
    :func:`install_staged`."""
    staging = folder / f"{STAGING_PREFIX}{command.replace(' ', '-').replace('/', '-')}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def files_under(folder: Path) -> list[str]:
    """Relative paths of every file under ``folder`` (links included, not followed), sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_symlink() or not p.is_dir())


def install_staged(staging: Path, folder: Path, flag: str, command: str) -> list[str]:
    """Move every file of ``staging`` into ``folder`` under the rule, then delete the files ``command`` wrote
    there before that this output no longer has (a smaller merge's extra shards); ``staging`` is removed.

    Refuses (:class:`OutputConflict`) before moving anything when a file would replace one fspo did not write.
    Returns the installed relative paths.
    """
    files = files_under(staging)
    check_output_paths(flag, folder, files, command)
    earlier = [p for p, c in _record_entries(folder).items() if c == command and not p.endswith("/")]
    for relative in files:
        destination = folder / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / relative, destination)
    stale = [p for p in earlier if p not in files]
    for relative in stale:
        if _kind(folder / relative) == FILE:
            (folder / relative).unlink()
            _remove_empty_parents(folder, folder / relative)
    forget_outputs(folder, stale)
    shutil.rmtree(staging, ignore_errors=True)
    return files


def _remove_empty_parents(folder: Path, path: Path) -> None:
    parent = path.parent
    while parent != folder and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def main(argv: list[str] | None = None) -> int:
    """``check [--no-record] --flag=F --command=C FOLDER PATH...`` prints the resolved folder;
    ``install --flag=F --command=C STAGING FOLDER`` moves a staged output in. Exit 2 with one line on stderr,
    ``C: F FOLDER: ...``, when the rule refuses."""
    parser = argparse.ArgumentParser(prog="python -m fspo.output_dir", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "install"))
    parser.add_argument("--flag", default="--output-dir", help="the option that named the folder")
    parser.add_argument("--command", default="fspo", help="the command that writes it")
    parser.add_argument("--no-record", action="store_true", help="check: record nothing")
    parser.add_argument("paths", nargs="+", help="check: FOLDER PATH...; install: STAGING FOLDER")
    args = parser.parse_args(argv)
    try:
        if args.action == "check":
            print(check_output_paths(args.flag, args.paths[0], args.paths[1:], args.command, not args.no_record))
        elif len(args.paths) != 2:
            parser.error("install takes STAGING FOLDER")
        else:
            folder = output_folder(args.flag, args.paths[1])
            install_staged(Path(args.paths[0]), folder, args.flag, args.command)
    except OutputConflict as error:
        print(f"{args.command}: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
