"""Can this node's NVIDIA driver run the installed torch? Checked by set-up and before Ray starts.

A torch built for a newer CUDA major than the driver supports installs and imports, but
``torch.cuda.is_available()`` is False on that node, and the run would fail inside its Ray workers. The rule,
from NVIDIA's CUDA Compatibility guide ("Minor Version Compatibility", Table 1): since CUDA 11, a program built
with CUDA X.Y runs on any driver that supports CUDA X.0 or newer, so only the major versions are compared; a
newer driver always runs an older build (backward compatibility).

The driver's CUDA version is the one in ``nvidia-smi``'s header ("CUDA Version: X.Y"). NVML's documentation of
``nvmlSystemGetCudaDriverVersion`` says it is what ``cuDriverGetVersion`` returns from the libcuda found, the library
torch loads, so NVIDIA's forward-compatibility package, where the loader finds it, should pass (not tried on such a
node). The kernel driver's own version (``Driver Version``) only names what to upgrade. No ``nvidia-smi``, or one that
fails (a GPU-less head node), and a torch without CUDA (the CPU build): nothing to check.

``bash scripts/setup.sh`` runs ``python -m fspo.launch.cuda_driver`` after installing; the dry run and
``fspo train`` call :func:`check_node_driver` from :func:`fspo.launch.preflight.preflight`.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from fspo.config.vocabulary import ConfigError

# The oldest Linux driver branch of each CUDA major (NVIDIA's CUDA Compatibility guide, "Minor Version
# Compatibility", Table 1: 13.x >= 580, 12.x >= 525, 11.x >= 450).
MINIMUM_DRIVER = {11: 450, 12: 525, 13: 580}
# The CUDA builds PyTorch publishes of each torch release (pytorch/pytorch RELEASE.md, "Release Compatibility
# Matrix"); the `gpu` extra pins torch 2.11.0 (through verl[vllm]==0.9.1).
TORCH_CUDA_BUILDS = {"2.11": ((12, 6), (12, 8), (13, 0))}
# The packages PyTorch builds per CUDA version, installed together from one index (torchvision refuses a torch
# of another CUDA major at import).
TORCH_PACKAGES = ("torch", "torchvision", "torchaudio")
NVIDIA_SMI_TIMEOUT_S = 60


@dataclass(frozen=True)
class NodeDriver:
    """What ``nvidia-smi``'s header says about this node's driver."""

    cuda: tuple[int, int]  # the newest CUDA (major, minor) the loaded libcuda supports
    version: str | None  # the kernel driver's version, e.g. "550.54.15"


def cuda_version(text: str) -> tuple[int, int] | None:
    """``"12.4"`` (or ``"12.4.1"``) -> ``(12, 4)``; None for anything else."""
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_nvidia_smi(output: str) -> NodeDriver | None:
    """The driver ``nvidia-smi``'s output describes; None when its header names no CUDA version."""
    cuda = re.search(r"CUDA Version\s*:\s*(\d+\.\d+)", output)
    if not cuda:
        return None
    version = re.search(r"Driver Version\s*:\s*([0-9][0-9.]*)", output)
    return NodeDriver(cuda_version(cuda.group(1)), version.group(1) if version else None)


def nvidia_smi_output() -> str | None:
    """``nvidia-smi``'s output on this node; None without one, or when it fails or hangs (no driver to check)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def torch_release(version: str) -> str:
    """``"2.11.0+cu130"`` -> ``"2.11"``."""
    return ".".join(version.split("+")[0].split(".")[:2])


def torch_index(builds: tuple[tuple[int, int], ...], driver_cuda: tuple[int, int]) -> str | None:
    """PyTorch's wheel index (``cu126``) of the build among ``builds`` this driver runs best: of the driver's CUDA
    major, the newest no newer than the driver's CUDA, else the oldest (minor version compatibility runs it)."""
    same_major = [build for build in builds if build[0] == driver_cuda[0]]
    if not same_major:
        return None
    covered = [build for build in same_major if build <= driver_cuda]
    major, minor = max(covered) if covered else min(same_major)
    return f"cu{major}{minor}"


def driver_needed(cuda_major: int) -> str:
    branch = MINIMUM_DRIVER.get(cuda_major)
    return f"{branch} or newer" if branch else f"one for CUDA {cuda_major}"


def other_build(driver_cuda: tuple[int, int], versions: dict[str, str], python: str, vllm: str | None) -> str:
    """What follows "upgrade the driver": the command that installs torch (and vLLM) built for the driver's CUDA."""
    torch_version, major = versions["torch"], driver_cuda[0]
    builds = TORCH_CUDA_BUILDS.get(torch_release(torch_version))
    if builds is None:  # a torch release this module does not know: PyTorch's page lists its builds
        return (
            f", or install torch {torch_version}'s CUDA {major} build if PyTorch has one "
            "(https://pytorch.org/get-started/previous-versions/)"
        )
    index = torch_index(builds, driver_cuda)
    if index is None:
        return f" (torch {torch_version} has no CUDA {major} build)"
    pins = " ".join(f"{name}=={versions[name].split('+')[0]}" for name in TORCH_PACKAGES if name in versions)
    line = f", or install torch's CUDA {major} build: `{python} -m pip install {pins} --index-url "
    line += f"https://download.pytorch.org/whl/{index}`"
    if vllm:
        line += f"; vLLM {vllm} then needs its CUDA {major} build too (its kernels are compiled for one torch build)"
    return line


def driver_refusal(
    driver: NodeDriver, torch_cuda: str, versions: dict[str, str], python: str, vllm: str | None = None
) -> str | None:
    """One line saying why ``driver`` cannot run torch built for CUDA ``torch_cuda`` and what to do; None if it can.

    ``versions`` holds the installed :data:`TORCH_PACKAGES` (torch at least), ``python`` the interpreter to
    reinstall them with, ``vllm`` vLLM's version where it is installed.
    """
    built_for = cuda_version(torch_cuda)
    if built_for is None or built_for[0] <= driver.cuda[0]:
        return None
    driver_name = f"driver {driver.version}" if driver.version else "driver"
    return (
        f"this node's NVIDIA {driver_name} supports CUDA up to {driver.cuda[0]}.{driver.cuda[1]}, but torch "
        f"{versions['torch']} is built for CUDA {torch_cuda}, which needs driver {driver_needed(built_for[0])}: "
        f"upgrade the driver{other_build(driver.cuda, versions, python, vllm)}"
    )


def installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def check_node_driver() -> None:
    """Raise ConfigError (one line) when this node's driver cannot run the installed torch's CUDA build."""
    output = nvidia_smi_output()
    driver = parse_nvidia_smi(output) if output else None
    if driver is None:
        return
    import torch  # seconds; only on a node with a driver to compare against

    if not torch.version.cuda:  # the CPU (or ROCm) build
        return
    versions = {**installed_versions(TORCH_PACKAGES), "torch": torch.__version__}
    vllm = installed_versions(("vllm",)).get("vllm")
    refusal = driver_refusal(driver, torch.version.cuda, versions, sys.executable, vllm)
    if refusal:
        raise ConfigError(refusal)


def main() -> int:
    """Set-up's check: exit 2 with one line on stderr when this node cannot run the installed torch."""
    try:
        check_node_driver()
    except ConfigError as error:
        print(f"fspo: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
