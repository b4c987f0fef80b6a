"""Which prebuilt flash-attn wheel fits a GPU install, if any (``python -m fspo.cli.flash_attn_wheel``).

PyPI carries flash-attn only as a source package whose ``setup.py`` imports torch and compiles CUDA
kernels for a long time, and a built wheel only loads into the exact (CUDA major, torch major.minor,
CPython, C++ ABI) it was compiled against, none of which its file name's tags say. ``scripts/setup.sh``
therefore installs one only from the list in ``pyproject.toml`` (``[[tool.fspo.flash-attn-wheels]]``)
and only where all four match; elsewhere it goes without and the recipes fall back to ``sdpa``
(:mod:`fspo.launch.attention`). A wheel is also built for one CPU architecture (its file name's platform tag:
an aarch64 node, e.g. a GH200, never gets an x86-64 wheel), and each listed URL carries the sha256 of the
file, which pip checks (``--require-hashes``) before installing it.

Standard library only: the set-up dry run calls it in a virtualenv where nothing is installed.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from fspo.utils.input_files import InputFileError, read_json, read_toml

# A CUDA build of torch requires NVIDIA's libraries by name, e.g. nvidia-cudnn-cu13 or nvidia-cuda-runtime-cu12.
_NVIDIA_LIBRARY = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)\b", re.IGNORECASE)


@dataclass(frozen=True)
class TorchBuild:
    """What a compiled torch extension must match.

    Attributes:
        cuda: CUDA major version torch was built with, e.g. ``"13"``.
        torch: torch's ``major.minor``, e.g. ``"2.11"``.
        python: the CPython tag, e.g. ``"cp312"``.
        cxx11abi: torch's ``_GLIBCXX_USE_CXX11_ABI``; ``None`` where torch is not installed yet (a dry run).
        machine: the CPU architecture, as a wheel's platform tag ends: ``"x86_64"``, ``"aarch64"``.
    """

    cuda: str
    torch: str
    python: str
    cxx11abi: bool | None
    machine: str = "x86_64"

    def describe(self) -> str:
        abi = "C++11 ABI unknown before install" if self.cxx11abi is None else f"cxx11abi={self.cxx11abi}"
        return f"CUDA {self.cuda}, torch {self.torch}, {self.python}, {abi}, {self.machine}"


# CPU architectures as wheel platform tags end (``linux_x86_64``, ``manylinux_2_28_aarch64``).
MACHINES = ("x86_64", "aarch64", "ppc64le", "s390x", "armv7l", "i686")
SHA256 = re.compile(r"[0-9a-f]{64}")


def this_machine() -> str:
    """This machine's CPU architecture as a wheel's platform tag names it (``arm64`` is ``aarch64`` on Linux)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def python_tag(version_info=sys.version_info) -> str:
    return f"cp{version_info[0]}{version_info[1]}"


def major_minor(version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"2.11"``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def wheel_python_tag(url: str) -> str:
    """The interpreter tag of a wheel's file name (``name-version-PYTHON-abi-platform.whl``)."""
    name = url.rsplit("/", 1)[-1]
    parts = name[: -len(".whl")].split("-")
    if not name.endswith(".whl") or len(parts) < 5:
        raise ValueError(f"not a wheel file name: {name}")
    return parts[-3]


def wheel_machine(url: str) -> str:
    """The CPU architecture of a wheel's platform tag (``...-linux_x86_64.whl`` -> ``x86_64``)."""
    name = url.rsplit("/", 1)[-1]
    wheel_python_tag(name)  # a wheel file name, or ValueError
    tag = name[: -len(".whl")].split("-")[-1]
    for machine in MACHINES:
        if tag.endswith(machine):
            return machine
    raise ValueError(f"no CPU architecture in the platform tag of {name}")


def pick_wheel(build: TorchBuild, wheels: list[dict]) -> dict | None:
    """The first listed wheel made for ``build`` (its entry), or ``None``.

    Each entry of ``wheels`` has ``url``, ``sha256``, ``cuda``, ``torch`` and ``cxx11abi``; its CPython and
    CPU architecture come from the file name. An unknown ABI (``build.cxx11abi is None``) matches either,
    so that a dry run can say what the install would pick.
    """
    for wheel in wheels:
        if (
            str(wheel["cuda"]) == build.cuda
            and str(wheel["torch"]) == build.torch
            and wheel_python_tag(wheel["url"]) == build.python
            and wheel_machine(wheel["url"]) == build.machine
            and (build.cxx11abi is None or bool(wheel["cxx11abi"]) == build.cxx11abi)
        ):
            return wheel
    return None


def requirement(wheel: dict) -> str:
    """The pip requirement line that installs ``wheel`` only if its file has the listed sha256."""
    if not SHA256.fullmatch(str(wheel.get("sha256", ""))):
        raise ValueError(f"{wheel['url']} has no sha256 (64 lowercase hex digits) in pyproject.toml")
    return f"flash-attn @ {wheel['url']} --hash=sha256:{wheel['sha256']}"


def installed_torch_build() -> TorchBuild | None:
    """The build of the torch installed here, ``None`` for a build without CUDA."""
    import torch

    if not torch.version.cuda:
        return None
    return TorchBuild(
        cuda=torch.version.cuda.split(".")[0],
        torch=major_minor(torch.__version__),
        python=python_tag(),
        cxx11abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        machine=this_machine(),
    )


def reported_torch_build(report: dict, python: str) -> TorchBuild | None:
    """The torch a ``pip install --dry-run --report`` would install, from its metadata (``None`` without CUDA)."""
    for item in report.get("install", []):
        metadata = item["metadata"]
        if metadata["name"].lower() != "torch":
            continue
        cuda = {m.group(1) for r in metadata.get("requires_dist", []) if (m := _NVIDIA_LIBRARY.match(r))}
        if len(cuda) != 1:
            return None
        return TorchBuild(
            cuda=cuda.pop(),
            torch=major_minor(metadata["version"]),
            python=python,
            cxx11abi=None,
            machine=this_machine(),
        )
    return None


def listed_wheels(pyproject: Path) -> list[dict]:
    wheels = read_toml(pyproject).get("tool", {}).get("fspo", {}).get("flash-attn-wheels", [])
    if not isinstance(wheels, list) or not all(isinstance(wheel, dict) for wheel in wheels):
        raise InputFileError(f"{pyproject}: [[tool.fspo.flash-attn-wheels]] must be a list of tables")
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fspo.cli.flash_attn_wheel",
        description="Print the pip requirement line (URL and sha256) of the prebuilt flash-attn wheel for this "
        "machine's torch and CPU (nothing if none); one line on stderr says which, or that the install goes without.",
    )
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--report", type=Path, help="a pip --dry-run --report file: torch as it would be installed")
    args = parser.parse_args(argv)
    try:
        build = reported_torch_build(read_json(args.report), python_tag()) if args.report else installed_torch_build()
        if build is None:
            print("fspo: flash-attn: torch is not a CUDA build here; installing without it", file=sys.stderr)
            return 0
        wheel = pick_wheel(build, listed_wheels(args.pyproject))
    except InputFileError as error:
        print(f"fspo: flash-attn: {error}", file=sys.stderr)
        return 2
    if wheel is None:
        print(
            f"fspo: flash-attn: no prebuilt wheel for {build.describe()}; installing without it "
            "(the recipes fall back to sdpa)",
            file=sys.stderr,
        )
        return 0
    try:
        line = requirement(wheel)
    except ValueError as error:
        print(f"fspo: flash-attn: {error}; installing without it (the recipes fall back to sdpa)", file=sys.stderr)
        return 0
    print(f"fspo: flash-attn: {wheel['url'].rsplit('/', 1)[-1]}, prebuilt for {build.describe()}", file=sys.stderr)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
