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
    # several files of one result (train and test splits): with output_set(folder, flag, command) as staging: ...

Files of one result move in as a set (:func:`install_staged`): staged, a journal (:data:`JOURNAL`) listing the
renames, the renames, the journal removed; a kill at any point leaves the earlier set or the new one once the
next claim of the folder finishes the journal, and a reader of a file the journal lists refuses until then
(:func:`fspo.utils.input_files.unfinished_set`).

Every path fspo deletes, replaces or moves in goes through :func:`remove_output` or :func:`move_into`: resolved
inside the output folder one name at a time (file descriptors opened without following links), so no record
content reaches outside it; a record entry that names a path outside the folder, or one through a link, is
refused (:func:`record_entries`). One command writes a folder at a time: :func:`claim_output_folder` takes
the folder's advisory lock (:data:`LOCK`, ``fcntl.flock``) for the command's life and names the other
process when it is taken.

``python -m fspo.utils.output_dir check|install|hold|finish ...`` does the same for scripts (scripts/merge_checkpoint.sh).
"""

from __future__ import annotations

import argparse
import atexit
import collections
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fspo.config.environment import environment_value
from fspo.utils.arguments import UsageError
from fspo.utils.atomic_file import write_text_atomically
from fspo.utils.input_files import (
    OUTPUT_JOURNAL,
    InputFileError,
    UnpairedSurrogate,
    parse_json_bytes,
    read_json,
)

RECORD = ".fspo-outputs.json"
LOCK = ".fspo-lock"
# Set by :func:`hold` for the command it runs: ``pid:folder``, a folder that process holds for it and its children.
HELD_ENV = "FSPO_OUTPUT_FOLDER_HELD"
STAGING_PREFIX = ".fspo-staging-"
# A set of files moving in together (:func:`install_staged`): the staged folder renamed to ``SET_PREFIX<pid>``, and
# the journal that lists its renames until they are all made.
SET_PREFIX = ".fspo-set-"
JOURNAL = OUTPUT_JOURNAL  # its readers refuse a file it lists: fspo.utils.input_files.unfinished_set
JOURNAL_ABOUT = "renames fspo was making when it stopped; the next fspo command writing this folder finishes them"

# Kinds of what is at a path (lstat, links not followed); None: nothing there.
FILE, FOLDER, LINK, OTHER = "file", "folder", "link", "other"


class OutputConflict(UsageError):
    """A command would have to replace, delete or write through something fspo did not write."""


def _parts(path: str) -> tuple[str, ...]:
    return PurePosixPath(path.rstrip("/")).parts


def entry_problem(path: str) -> str | None:
    """Why ``path`` cannot name something inside an output folder (None: it can): the rule for every path a
    command plans and every entry of a record, whatever wrote it."""
    if "\x00" in path:
        return "holds a NUL character"
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        return "is not a name this file system can hold"
    parts = _parts(path)
    if not parts:
        return "names no file"
    if PurePosixPath(path).is_absolute():
        return "is an absolute path, outside the output folder"
    if ".." in parts:
        return "climbs out of the output folder with '..'"
    return None


def _check_relative(path: str) -> None:
    problem = entry_problem(path)
    if problem:
        raise OutputConflict(f"{json.dumps(path)} {problem}: fspo writes only inside its output folder")


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
    """The paths the folder's record lists as fspo's; [] when there is no record (or it is not JSON).

    Raises :class:`OutputConflict` when an entry breaks the rule (:func:`record_entries`).
    """
    return list(record_entries(Path(folder)))


def record_entries(folder: Path) -> dict[str, str]:
    """The folder's record, ``{path: the command that wrote it}``; {} when there is none (or it is not JSON:
    then nothing is fspo's, which refuses more, never less).

    The record is the user's file as much as fspo's: an entry outside the folder (``../x``, an absolute path),
    through a symbolic link (a listed folder since replaced by a link), or a record that is itself a link is
    refused, naming the entry, so that nothing is deleted on its word.
    """
    record = folder / RECORD
    if _kind(record) == LINK:
        raise OutputConflict(f"{RECORD} is a symbolic link: fspo keeps its record of outputs in a plain file")
    try:
        written = read_json(record)["written"]
        entries = {p: c for p, c in written.items() if isinstance(p, str) and isinstance(c, str)}
    except UnpairedSurrogate as error:  # an entry no file can have: refused like any entry that breaks the rule
        raise OutputConflict(f"{error}; fspo deletes nothing on its word: fix or delete the record") from None
    except (InputFileError, KeyError, TypeError, AttributeError):
        return {}
    for entry in entries:
        problem = entry_problem(entry) or _link_on_the_way(folder, entry)
        if problem:
            raise OutputConflict(
                f"{RECORD} lists {json.dumps(entry)}, which {problem}; fspo never wrote that entry and deletes "
                "nothing on its word: remove it from the record (or delete the record) and run again"
            )
    return entries


def _link_on_the_way(folder: Path, entry: str) -> str | None:
    """The first symbolic link at or above ``entry`` inside ``folder``, as a reason (None: none)."""
    parts = _parts(entry)
    for depth in range(1, len(parts) + 1):
        kind = _kind(folder.joinpath(*parts[:depth]))
        if kind == LINK and depth == len(parts):
            return "is now a symbolic link"
        if kind == LINK:
            return f"passes through {'/'.join(parts[:depth])}, now a symbolic link"
        if kind != FOLDER:
            return None
    return None


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
    text = os.path.expanduser(os.fspath(folder))
    problem = "holds a NUL character" if "\x00" in text else entry_problem(text.replace("/", "") or "x")
    if problem:  # a name the file system cannot hold
        raise OutputConflict(f"{flag} {json.dumps(text)} {problem}: give another folder")
    path = Path(text)
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


@dataclass
class _Held:
    fd: int | None  # None: a parent process holds the lock for this one (HELD_ENV)
    pid: int
    made: list[Path] = field(default_factory=list)  # folders the claim created, deepest last


_HELD: dict[Path, _Held] = {}


def claim_output_folder(flag: str, folder: str | os.PathLike, command: str) -> Path:
    """The output folder, resolved (:func:`output_folder`), its record checked (:func:`record_entries`) and its
    write lock held by this process until :func:`release_output_folders` (the ``fspo`` dispatcher calls it as a
    command ends; so does the process's exit). Up front, before any work: a folder another command is writing
    (named by its pid and command line), a file, an unwritable folder or a tampered record is one
    :class:`OutputConflict`. A set of files a killed command was moving in is finished (:func:`finish_set`) and the
    staging folders killed commands left are removed. Claiming a folder this process holds again is free."""
    path = output_folder(flag, folder)
    if path in _HELD and not path.is_dir():  # removed since (a test's tmp folder, a user's rm): claim it anew
        _release(path)
    newly = path not in _HELD
    if newly:
        held_for_us = _held_for_us()
        _check_ancestors(flag, path, {*_HELD, Path(held_for_us)} if held_for_us else set(_HELD))
        made = [parent for parent in (path, *path.parents) if not parent.exists()][::-1]
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputConflict(f"{flag} {path}: the folder cannot be created ({error.strerror})") from None
        try:
            fd = None if held_for_us == str(path) else _lock(flag, path, command)
        except OutputConflict:
            _remove_made(made)
            raise
        _HELD[path] = _Held(fd, os.getpid(), made)
    try:
        record_entries(path)
        if newly:  # the folder is ours now: finish what a killed command left half done
            finish_set(path)
            _remove_orphans(path)
    except OutputConflict as error:
        if newly:
            _release(path)
        raise OutputConflict(f"{flag} {path}: {error}") from None
    return path


def _ancestors() -> Iterator[int]:
    """This process's parent, its parent, ... (from /proc; the parent alone where there is none)."""
    pid = os.getppid()
    while pid > 1:
        yield pid
        try:
            stat_line = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return
        pid = int(stat_line.rsplit(b")", 1)[1].split()[1])  # the field after the command name is the parent


def _held_for_us() -> str:
    """The folder :data:`HELD_ENV` names when an ancestor of this process holds its lock (``pid:folder``), else ''.
    A value naming a pid that is no ancestor, or that does not hold the folder's lock, hands nothing over: a
    leaked or forged value would let two commands write one folder."""
    value = environment_value(HELD_ENV) or ""
    pid_text, _, folder = value.partition(":")
    if not folder or not pid_text.isdigit() or int(pid_text) not in _ancestors():
        return ""
    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # took it: nobody holds the folder
        return ""
    except BlockingIOError:
        return folder if _holder(fd).startswith(f"pid {int(pid_text)}:") else ""
    finally:
        os.close(fd)


def _lock(flag: str, folder: Path, command: str) -> int:
    """A descriptor holding ``folder``'s lock file under ``fcntl.flock`` (exclusive), the holder written in it."""
    lock = folder / LOCK
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise OutputConflict(
                f"{flag} {folder}: {LOCK} cannot be opened as fspo's lock file ({error.strerror}): move it away"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise OutputConflict(
                f"{flag} {folder} is being written by another command ({holder}); one command writes a folder at "
                "a time: wait for it to end or give another folder"
            ) from None
        # The holder before us may have deleted the file as it let go: lock the one at the name now.
        if _same_file(fd, lock):
            break
        os.close(fd)
    if os.fstat(fd).st_size and _holder(fd) == "a process that left no name":
        os.close(fd)
        raise OutputConflict(f"{flag} {folder}: {LOCK} is not fspo's lock file: move it away")
    os.ftruncate(fd, 0)
    holder = {"pid": os.getpid(), "command": command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.pwrite(fd, json.dumps(holder).encode("utf-8", "backslashreplace"), 0)
    return fd


def _check_ancestors(flag: str, folder: Path, ours: set[Path]) -> None:
    """Refuse ``folder`` when a folder above it is another command's (its lock is held): a run's folder holds
    what that command writes. Folders this process holds (``ours``) are its own to write in."""
    for above in folder.parents:
        if above in ours:
            return
        try:
            fd = os.open(above / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputConflict(
                f"{flag} {folder} lies in {above}, which is being written by another command ({_holder(fd)}): "
                "wait for it to end or give another folder"
            ) from None
        finally:
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        at_name = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (at_name.st_dev, at_name.st_ino) == (held.st_dev, held.st_ino)


def _holder(fd: int) -> str:
    """Who holds the lock, from what the holder wrote in the file: ``pid N: command, since T``."""
    try:
        holder = parse_json_bytes(LOCK, os.pread(fd, 4096, 0))
        return f"pid {int(holder['pid'])}: {holder['command']}, since {holder['since']}"
    except (ValueError, KeyError, TypeError):  # InputFileError (not JSON) is a ValueError
        return "a process that left no name"


def _release(folder: Path) -> None:
    held = _HELD.pop(folder)
    if held.pid != os.getpid():  # a forked child: the lock and the folder are its parent's
        return
    if held.fd is not None:
        if _same_file(held.fd, folder / LOCK):
            (folder / LOCK).unlink()  # while still held, so a waiting claim sees the name gone and retries
        os.close(held.fd)
    _remove_made(held.made)


def _remove_made(made: list[Path]) -> None:
    """Remove the folders a claim created (outermost first in ``made``) that nothing was written in."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            break


def release_output_folders() -> None:
    """Let go of every output folder this process claimed (a command ended)."""
    for folder in list(_HELD):
        _release(folder)


atexit.register(release_output_folders)


# Every option a parser declared with :func:`output_option`: ``{command: {flag: "folder" or "file"}}`` (the
# command guard generates its output-folder cases from it).
OUTPUT_OPTIONS: dict[str, dict[str, str]] = {}


def output_option(command: str, flag: str, file: bool = False, convert: Callable[[str], object] = str):
    """The argparse ``type`` of an option naming where ``command`` writes: a folder, or with ``file`` a file
    (its folder). The folder is claimed (:func:`claim_output_folder`) as the option is read, so
    that a folder another command is writing, a file where a folder is expected, an unwritable folder or a
    tampered record is argparse's one-line error before any other argument is looked at or any work starts;
    a string default is read (and claimed) the same way. Returns ``convert(value)``."""
    OUTPUT_OPTIONS.setdefault(command, {})[flag] = "file" if file else "folder"

    def claim(value: str):
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(value))) if file else value
        try:
            claim_output_folder(flag, folder, command)
        except OutputConflict as error:
            raise argparse.ArgumentTypeError(" ".join(str(error).split())) from None
        return convert(value)

    return claim


def check_output_paths(
    flag: str, folder: str | os.PathLike, planned: Iterable[str], command: str, record: bool = True
) -> Path:
    """THE check every command makes before it writes into its output folder (the rule of this module).

    Claims the folder (:func:`claim_output_folder`: its lock, its record checked), then refuses
    (:class:`OutputConflict`, one line naming the path and the fix) when any of ``planned`` would
    replace, delete or write through something fspo did not write: a file or non-empty folder the folder's
    record does not list, a symbolic link, a file where a folder is needed; or when a folder it writes in, at any
    depth, is not writable by this user (:func:`unwritable_folder`). With ``record`` (the default) the
    planned paths are then added to the record, so a re-run (or a run that failed half way) may replace them.
    A refused check lets go of a folder it claimed.

    Args:
        flag: The option that named the folder (``--output-dir``), for the message.
        folder: The output folder; created if missing; a symbolic link to a folder is followed.
        planned: Relative paths the command will write: files, or folders ending in ``/`` that are wholly its own.
        command: Who writes them (``fspo evaluate``), kept in the record.

    Returns:
        The output folder, resolved (write under this path, not through the link).
    """
    planned = list(dict.fromkeys(planned))
    claimed_before = set(_HELD)
    path = claim_output_folder(flag, folder, command)
    try:
        found = conflicts(planned, survey(path, planned), record_entries(path))
        if found:
            where, why = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise OutputConflict(
                f"{flag} {path}: {where} {why}{more}; fspo replaces only what it wrote there "
                f"(listed in {RECORD}): move it away or give another folder"
            )
        locked = unwritable_folder(path, planned)
        if locked:
            raise OutputConflict(
                f"{flag} {path}: {locked} is not writable by this user, and fspo writes there: make it writable "
                "(chmod u+w) or give another folder"
            )
    except OutputConflict:
        if path not in claimed_before:
            _release(path)
        raise
    if record:
        record_outputs(path, planned, command)
    return path


# How many folders :func:`unwritable_folder` looks at under one planned folder: a run's checkpoint folder holds a few
# hundred; past this the command may still meet a read-only one as it writes.
WALK_LIMIT = 10_000


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def unwritable_folder(folder: Path, planned: Iterable[str]) -> str | None:
    """The first folder (relative to ``folder``, ``.`` for itself) that writing ``planned`` needs to write in and
    this user cannot, or None: for each planned path the deepest existing folder on its way (where its file or
    missing folders are made), and under a planned folder ending in ``/`` every folder it holds (its content is
    replaced or deleted), up to :data:`WALK_LIMIT` each; links are not followed (nothing is written through one)."""
    for path in planned:
        parts = _parts(path)
        deepest = folder
        for depth in range(1, len(parts) + path.endswith("/")):
            if _kind(folder.joinpath(*parts[:depth])) != FOLDER:
                break
            deepest = folder.joinpath(*parts[:depth])
        inside = [deepest]
        if path.endswith("/") and deepest == folder.joinpath(*parts):
            inside = _folders_under(deepest, WALK_LIMIT)
        for candidate in inside:
            if not _writable(candidate):
                return candidate.relative_to(folder).as_posix()
    return None


def _folders_under(top: Path, limit: int) -> list[Path]:
    """``top`` and the folders under it, breadth first, links not followed, at most ``limit``."""
    found, pending = [], collections.deque([top])
    while pending and len(found) < limit:
        current = pending.popleft()
        found.append(current)
        try:
            pending += sorted(Path(e.path) for e in os.scandir(current) if e.is_dir(follow_symlinks=False))
        except OSError:  # unreadable: then also not writable as a whole, reported by _writable
            continue
    return found


def record_outputs(folder: Path, paths: Iterable[str], command: str) -> None:
    """Add ``paths`` to the folder's record as written by ``command`` (atomically; the folder is created)."""
    _write_record(folder, {**record_entries(folder), **{p: command for p in paths}})


def forget_outputs(folder: Path, paths: Iterable[str]) -> None:
    """Drop ``paths`` from the folder's record (they were deleted by the command that wrote them)."""
    gone = set(paths)
    _write_record(folder, {p: c for p, c in record_entries(folder).items() if p not in gone})


def _write_record(folder: Path, written: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"about": "files and folders (ending in /) fspo wrote here", "written": written}, indent=2)
    write_text_atomically(folder / RECORD, text + "\n")


def staging_folder(folder: Path, command: str) -> Path:
    """A fresh folder inside ``folder`` (same file system, so its files move in by rename) for
    :func:`install_staged`."""
    name = f"{STAGING_PREFIX}{command.replace(' ', '-').replace('/', '-')}-{os.getpid()}"
    remove_output(folder, name)  # one a killed run of this pid left
    (folder / name).mkdir(parents=True)
    return folder / name


def files_under(folder: Path) -> list[str]:
    """Relative paths of every file under ``folder`` (links included, not followed), sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_symlink() or not p.is_dir())


def install_staged(staging: Path, folder: Path, flag: str, command: str, prune: bool = True) -> list[str]:
    """Move every file of ``staging`` into ``folder`` under the rule, as one set (:func:`_install_set`): a kill at
    any point leaves the folder's earlier set or this one, never a mix. With ``prune``, the files ``command`` wrote
    there before that this output no longer has (a smaller merge's extra shards) are deleted with the move;
    ``staging`` is gone afterwards.

    Refuses (:class:`OutputConflict`) before moving anything when a file would replace one fspo did not write,
    or when the record lists an entry outside the folder or through a link. Returns the installed paths.
    """
    files = files_under(staging)
    check_output_paths(flag, folder, files, command)
    earlier = [p for p, c in record_entries(folder).items() if c == command and not p.endswith("/")]
    stale = [p for p in earlier if p not in files] if prune else []
    _install_set(staging, folder, files, stale, command)
    return files


@contextmanager
def output_set(folder: Path, flag: str, command: str, prune: bool = False) -> Iterator[Path]:
    """A staging folder for the ``with`` block to write one result's files in (``train.parquet``, ``test.parquet``);
    they move into ``folder`` together when the block ends (:func:`install_staged`), and nothing moves when it
    raises. ``folder`` must be claimed (:func:`check_output_paths`)."""
    staging = staging_folder(folder, command)
    try:
        yield staging
        install_staged(staging, folder, flag, command, prune)
    finally:
        if os.path.lexists(staging):  # install_staged moved it away unless the block or the check failed
            remove_output(folder, staging.name)


# Test hook: called with a label at each point a set install can be killed at (tests/test_output_dir_sets.py).
_SET_STEP: Callable[[str], None] | None = None


def _step(label: str) -> None:
    if _SET_STEP is not None:
        _SET_STEP(label)


def _install_set(staging: Path, folder: Path, files: list[str], stale: list[str], command: str) -> None:
    """The files of ``staging`` into ``folder`` and ``stale`` out of it, all or nothing across a kill.

    The staged files first move, as one folder, to ``.fspo-set-<pid>`` (out of reach of a caller's clean-up of
    ``staging``); then :data:`JOURNAL` lists the renames, written atomically; then the renames; then the journal
    goes. Killed before the journal is written, the folder holds its earlier set and an orphan that the next claim
    removes (:func:`_remove_orphans`); killed after, the next claim finishes the renames (:func:`finish_set`), and
    until then a reader of a listed file refuses (:func:`fspo.utils.input_files.unfinished_set`)."""
    _step("written")
    moving = folder / f"{SET_PREFIX}{os.getpid()}"
    remove_output(folder, moving.name)  # one a killed run of this pid left
    try:
        os.rename(staging, moving)
    except OSError as error:  # staged on another file system (python -m fspo.utils.output_dir install)
        if error.errno != errno.EXDEV:
            raise
        shutil.copytree(staging, moving, symlinks=True)
        shutil.rmtree(staging)
    _step("staged")
    journal = {"about": JOURNAL_ABOUT, "command": command, "from": moving.name, "files": files, "stale": stale}
    write_text_atomically(folder / JOURNAL, json.dumps(journal, indent=2) + "\n")
    _step("journal written")
    finish_set(folder)


def read_journal(folder: Path) -> dict | None:
    """The folder's pending :data:`JOURNAL` (None: none), its entries checked as a record's are: it is a file in
    the user's folder, and nothing moves or is deleted on its word unless it names fspo's own set folder and paths
    inside the output folder."""
    path = folder / JOURNAL
    if not os.path.lexists(path):
        return None
    problem = None
    try:
        journal = read_json(path) if _kind(path) == FILE else None
    except InputFileError as error:
        journal, problem = None, str(error)
    if journal is not None:
        names = journal.get("files"), journal.get("stale")
        source = journal.get("from")
        if not (isinstance(source, str) and source.startswith(SET_PREFIX) and "/" not in source):
            problem = f"names {json.dumps(source)} as the set being moved in, not a {SET_PREFIX}* folder"
        elif not all(isinstance(n, list) and all(isinstance(p, str) for p in n) for n in names):
            problem = "does not list its files and stale paths as strings"
        else:
            bad = next((p for n in names for p in n if entry_problem(p)), None)
            problem = bad and f"lists {json.dumps(bad)}, which {entry_problem(bad)}"
    elif problem is None:
        problem = "is not a plain file"
    if problem:
        raise OutputConflict(
            f"{JOURNAL} {problem}; fspo moves and deletes nothing on its word: delete it and run the command again"
        )
    return journal


def finish_set(folder: Path) -> None:
    """Finish the set install :data:`JOURNAL` describes, if one is pending: each rename not yet made, the stale
    paths deleted, then the journal removed. Safe to repeat after a kill at any point of it."""
    journal = read_journal(folder)
    if journal is None:
        return
    moving = folder / journal["from"]
    for relative in journal["files"]:
        if os.path.lexists(moving / relative):
            move_into(moving / relative, folder, relative)
            _step(f"moved {relative}")
    for relative in journal["stale"]:
        remove_output(folder, relative)
    if journal["stale"]:
        forget_outputs(folder, journal["stale"])
    remove_output(folder, moving.name)
    (folder / JOURNAL).unlink()


# A temporary of fspo.utils.atomic_file.replacing: ".<stem>.tmp-<pid><suffix>".
_TEMPORARY = re.compile(r"\..*\.tmp-(\d+)(\.[^.]*)?")


def _orphan(name: str) -> bool:
    """``name`` is a staging or set folder, or a file's temporary, whose process (the pid in its name) is gone."""
    temporary = _TEMPORARY.fullmatch(name)
    if temporary:
        name = f"{STAGING_PREFIX}{temporary.group(1)}"
    if not name.startswith((STAGING_PREFIX, SET_PREFIX)):
        return False
    digits = name[len(name.rstrip("0123456789")) :]
    if not digits or int(digits) == os.getpid() or name[-len(digits) - 1] not in "-.":
        return False
    try:
        os.kill(int(digits), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive (another user's), or no pid at all
        return False
    return False


def _remove_orphans(folder: Path) -> None:
    """Remove the staging and set folders, and the temporaries of its files, that killed commands left in
    ``folder`` (no journal names them)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False) and _orphan(entry.name):
            remove_output(folder, entry.name)
        elif entry.is_file(follow_symlinks=False) and _TEMPORARY.fullmatch(entry.name) and _orphan(entry.name):
            os.unlink(entry.path)


def _open_folder(folder: Path, parts: tuple[str, ...], create: bool = False) -> int:
    """A descriptor of ``folder/parts...``, each name opened without following a link (``create``: missing
    folders are made). Raises :class:`OutputConflict` at a link or a file on the way, FileNotFoundError when a
    folder is missing."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for depth, part in enumerate(parts, 1):
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
            try:
                inner = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, dir_fd=fd)
                inner = os.open(part, flags, dir_fd=fd)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                linked = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
                what = "a symbolic link" if linked else "not a folder"
                raise OutputConflict(
                    f"{folder}: {'/'.join(parts[:depth])} is {what}: fspo deletes and writes nothing through it"
                ) from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_output(folder: Path, path: str) -> bool:
    """Delete ``folder/path`` (a file, or a folder with all it holds) and nothing outside ``folder``: every name
    is resolved inside it without following a link; a link on the way, or at ``path`` itself, is refused
    (:class:`OutputConflict`) and a link inside a deleted folder is removed, never followed. False when
    nothing was there. The one way fspo deletes in an output folder."""
    _check_relative(path)
    parts = _parts(path)
    try:
        parent = _open_folder(folder, parts[:-1])
    except FileNotFoundError:
        return False
    try:
        try:
            mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(mode):
            raise OutputConflict(f"{folder}: {path.rstrip('/')} is a symbolic link: fspo does not delete links")
        if stat.S_ISDIR(mode):
            shutil.rmtree(parts[-1], dir_fd=parent)  # descriptor-based: links inside are unlinked, not followed
        else:
            os.unlink(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)
    _remove_empty_parents(folder, parts[:-1])
    return True


def move_into(source: Path, folder: Path, path: str) -> None:
    """Move the file ``source`` to ``folder/path`` (its folders made), replacing a file there; never through
    or over a link, never outside ``folder``. The one way fspo replaces a file in an output folder."""
    _check_relative(path)
    parts = _parts(path)
    parent = _open_folder(folder, parts[:-1], create=True)
    try:
        try:
            mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a file"
            raise OutputConflict(f"{folder}: {path} is {what}: fspo replaces only its own files")
        os.replace(source, parts[-1], dst_dir_fd=parent)
    finally:
        os.close(parent)


def _remove_empty_parents(folder: Path, parts: tuple[str, ...]) -> None:
    """Remove the folders ``parts`` leads through, deepest first, while they are empty (links are left)."""
    for depth in range(len(parts), 0, -1):
        try:
            parent = _open_folder(folder, parts[: depth - 1])
        except (FileNotFoundError, OutputConflict):
            return
        try:
            os.rmdir(parts[depth - 1], dir_fd=parent)
        except OSError:
            return
        finally:
            os.close(parent)


def hold(flag: str, folder: str, command: str, argv: list[str]) -> int:
    """Run ``argv`` while this process holds ``folder``'s lock (a script's whole life: merge_checkpoint.sh); its
    exit status. The command and its children claim the folder freely (:data:`HELD_ENV` names it)."""
    path = claim_output_folder(flag, folder, command)
    try:
        child = subprocess.Popen(argv, env={**os.environ, HELD_ENV: f"{os.getpid()}:{path}"})
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # the child has it too: it decides, its status is ours
                continue
    finally:
        release_output_folders()


def main(argv: list[str] | None = None) -> int:
    """``check [--no-record] --flag=F --command=C FOLDER PATH...`` prints the resolved folder;
    ``install --flag=F --command=C STAGING FOLDER`` moves a staged output in; ``hold --flag=F --command=C FOLDER
    -- CMD...`` runs CMD holding the folder's lock; ``finish FOLDER`` finishes a set a killed command was moving in. Exit 2 with one line on stderr, ``C: F FOLDER: ...``, when
    the rule refuses."""
    parser = argparse.ArgumentParser(prog="python -m fspo.utils.output_dir", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "install", "hold", "finish"))
    parser.add_argument("--flag", default="--output-dir", help="the option that named the folder")
    parser.add_argument("--command", default="fspo", help="the command that writes it")
    parser.add_argument("--no-record", action="store_true", help="check: record nothing")
    parser.add_argument(
        "paths", nargs="+", help="check: FOLDER PATH...; install: STAGING FOLDER; hold: FOLDER CMD...; finish: FOLDER"
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "finish":  # the claim finishes a pending set
            claim_output_folder(args.flag, args.paths[0], args.command)
            release_output_folders()
        elif args.action == "check":
            print(check_output_paths(args.flag, args.paths[0], args.paths[1:], args.command, not args.no_record))
        elif args.action == "hold":
            if len(args.paths) < 2:
                parser.error("hold takes FOLDER -- CMD...")
            return hold(args.flag, args.paths[0], args.command, args.paths[1:])
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
