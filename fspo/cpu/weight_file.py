"""The actor's weights handed to the colocated ``hf`` rollout server through one shared-memory file.

Sent as a Ray argument, SmolLM2-135M's 538 MB of float32 weights are pickled in the actor worker: py-spy put ~2.9 s
of the quickstart's ~5.4 s weight sync there (2026-11-29). Here the worker copies each tensor once into a file in
``/dev/shm`` (RAM), the server copies it once into its model; the Ray call carries the file's name and layout.

Where that cannot work the caller sends the tensors as before: no ``/dev/shm`` or too little room in it (:func:`stage`
returns None), or a server on another machine (:func:`read` returns None). A file lives for one sync; one whose
writer was killed is removed by the next writer on the machine (its process id is in the name).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

SHARED_MEMORY = Path("/dev/shm")
PREFIX = "fspo-weights-"
_WRITER = re.compile(rf"{PREFIX}(\d+)-")
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

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _remove_orphans(folder: Path) -> None:
    """Remove the files of writers that are gone (killed mid-sync): each holds a model's weights in RAM."""
    for path in folder.glob(f"{PREFIX}*"):
        found = _WRITER.match(path.name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


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
    handle, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", dir=folder)
    staged = StagedWeights(path, size, tuple(entries))
    try:
        os.ftruncate(handle, size)
        os.close(handle)
        buffer = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        for entry, tensor in zip(entries, tensors.values()):
            _view(buffer, entry).copy_(tensor.detach().reshape(entry.shape))
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
