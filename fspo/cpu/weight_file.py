"""The actor's weights handed to the colocated ``hf`` rollout server through one shared-memory file.

Sent as a Ray argument, SmolLM2-135M's 538 MB of float32 weights are pickled in the actor worker: py-spy put ~2.9 s
of the quickstart's ~5.4 s weight sync there (2026-11-29). Here the worker copies each tensor once into a file in
``/dev/shm`` (RAM), the server copies it once into its model; the Ray call carries the file's name and layout.

Where that cannot work the caller sends the tensors as before: no ``/dev/shm`` or too little room in it (:func:`stage`
returns None), or a server on another machine (:func:`read` returns None). A file lives for one sync, its writer
holding a shared lock on it; the next writer removes the unlocked files its user owns (a killed writer's).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

SHARED_MEMORY = Path("/dev/shm")
PREFIX = "fspo-weights-"
# Left free in /dev/shm beyond the file: Ray's object store and torch's worker sharing live there too.
HEADROOM_BYTES = 1 << 30


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str  # torch dtype name, e.g. "float32"
    shape: tuple[int, ...]
    offset: int  # bytes from the file's start
    nbytes: int


@dataclass(frozen=True)
class StagedWeights:
    path: str
    size: int
    entries: tuple[Entry, ...]
    # The writer's descriptor, holding a shared lock while the file is in use (meaningless to the reader).
    lock_fd: int = field(default=-1, compare=False)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if self.lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)


def _remove_orphans(folder: Path) -> None:
    """Remove this user's files that no writer holds (killed mid-sync): each holds a model's weights in RAM. A lock,
    not the writer's process id, says so: ids are reused, and another container sharing the folder has its own."""
    for path in folder.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            if path.stat().st_uid != os.getuid():
                continue
            handle = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a writer holds it
                path.unlink()
            finally:
                os.close(handle)


def stage(tensors: dict[str, torch.Tensor], folder: Path | None = None) -> StagedWeights | None:
    """Copy ``tensors`` into a new file in ``folder``; None when ``folder`` lacks room or a tensor is not a plain
    one (a DTensor shard: the caller sends them)."""
    folder = SHARED_MEMORY if folder is None else folder
    if any(type(tensor) is not torch.Tensor for tensor in tensors.values()):
        return None
    entries, offset = [], 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        entries.append(Entry(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // 64) * 64  # 64-byte aligned, so every view is aligned for its dtype
    size = max(offset, 1)
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return None
    _remove_orphans(folder)
    if shutil.disk_usage(folder).free < size + HEADROOM_BYTES:
        return None
    try:
        handle, path = tempfile.mkstemp(prefix=PREFIX, dir=folder)
    except OSError:
        return None
    staged = StagedWeights(path, size, tuple(entries), lock_fd=handle)
    try:
        fcntl.flock(handle, fcntl.LOCK_SH)
        # Pages taken now: a sparse file that a full /dev/shm cannot back would kill the copy below with SIGBUS.
        os.posix_fallocate(handle, 0, size)
        buffer = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        for entry, tensor in zip(entries, tensors.values()):
            _view(buffer, entry).copy_(tensor.detach().reshape(entry.shape))
    except OSError:
        staged.remove()
        return None
    except BaseException:
        staged.remove()
        raise
    return staged


def read(path: str, size: int, entries: tuple[Entry, ...]) -> dict[str, torch.Tensor] | None:
    """The tensors :func:`stage` wrote, as views of the file (copy them before the writer removes it); None when the
    file is not on this machine."""
    if not os.path.isfile(path) or os.path.getsize(path) != size:
        return None
    buffer = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    return {entry.name: _view(buffer, entry) for entry in entries}


def _view(buffer: torch.Tensor, entry: Entry) -> torch.Tensor:
    dtype = getattr(torch, entry.dtype)
    return buffer[entry.offset : entry.offset + entry.nbytes].view(dtype).view(entry.shape)
