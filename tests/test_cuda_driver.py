"""The driver check (fspo.launch.cuda_driver): a node whose NVIDIA driver cannot run the installed torch's CUDA build
is refused in one line by set-up, the dry run and ``fspo train``, before Ray starts.

A stand-in ``nvidia-smi`` on PATH prints the header of a driver of each CUDA major (11.x, 12.x, 13.x); torch's CUDA
build is set on this CPU build's ``torch.version.cuda``.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.config.vocabulary import ConfigError
from fspo.launch.cuda_driver import (
    MINIMUM_DRIVER,
    TORCH_CUDA_BUILDS,
    NodeDriver,
    check_node_driver,
    cuda_version,
    driver_refusal,
    parse_nvidia_smi,
    torch_index,
    torch_release,
)

# nvidia-smi's header as drivers of each CUDA major print it (the kernel driver's version, then the CUDA version
# of the libcuda that NVML loads).
HEADERS = {
    "11.4": "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |",
    "12.4": "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |",
    "13.0": "| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |",
}
REPO = Path(__file__).resolve().parent.parent
RULE = "+-----------------------------------------------------------------------------------------+"
TORCH_2_11 = {"torch": "2.11.0", "torchvision": "0.26.0", "torchaudio": "2.11.0"}

cuda_majors = st.integers(min_value=11, max_value=14)
cuda_minors = st.integers(min_value=0, max_value=9)


@given(driver_cuda=st.tuples(cuda_majors, cuda_minors), torch_cuda=st.tuples(cuda_majors, cuda_minors))
def test_only_a_torch_of_a_newer_cuda_major_than_the_drivers_is_refused(driver_cuda, torch_cuda):
    """NVIDIA's minor version compatibility: a CUDA X.Y build runs on any driver of CUDA X.0 or newer."""
    refusal = driver_refusal(
        NodeDriver(driver_cuda, "550.54.15"), f"{torch_cuda[0]}.{torch_cuda[1]}", TORCH_2_11, "python"
    )
    if torch_cuda[0] <= driver_cuda[0]:
        assert refusal is None
        return
    assert refusal is not None and "\n" not in refusal
    assert f"supports CUDA up to {driver_cuda[0]}.{driver_cuda[1]}, but torch 2.11.0 is built for CUDA" in refusal
    if torch_cuda[0] in MINIMUM_DRIVER:
        assert f"needs driver {MINIMUM_DRIVER[torch_cuda[0]]} or newer: upgrade the driver" in refusal


@given(driver_cuda=st.tuples(cuda_majors, cuda_minors))
def test_the_torch_build_offered_is_one_pytorch_publishes_for_the_drivers_cuda_major(driver_cuda):
    builds = TORCH_CUDA_BUILDS["2.11"]
    index = torch_index(builds, driver_cuda)
    same_major = [build for build in builds if build[0] == driver_cuda[0]]
    if not same_major:
        assert index is None
        return
    offered = (int(index[2:4]), int(index[4:]))
    assert offered in same_major
    covered = [build for build in same_major if build <= driver_cuda]
    assert offered == (max(covered) if covered else min(same_major))


def test_the_torch_that_the_gpu_install_pins_has_its_cuda_builds_listed():
    """The builds offered are those of the torch verl[vllm]==0.9.1 pins (PyTorch's RELEASE.md: 12.6, 12.8, 13.0)."""
    pins = [
        match.group(1)
        for line in importlib.metadata.requires("verl")
        if (match := re.fullmatch(r"torch==(\S+)\s*;\s*extra\s*==\s*['\"]vllm['\"]", line.strip()))
    ]
    assert len(pins) == 1 and torch_release(pins[0]) in TORCH_CUDA_BUILDS


def test_each_drivers_header_is_read_and_a_header_without_cuda_leaves_nothing_to_check():
    for cuda, header in HEADERS.items():
        driver = parse_nvidia_smi(f"Tue Aug  5 10:00:00 2025\n{RULE}\n{header}\n{RULE}\n")
        assert driver == NodeDriver(cuda_version(cuda), header.split()[2])
    assert parse_nvidia_smi("CUDA Version                              : 12.2\n") == NodeDriver((12, 2), None)  # -q
    assert parse_nvidia_smi("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: N/A |") is None
    assert parse_nvidia_smi("No devices were found\n") is None


def test_a_cuda_12_driver_is_offered_torch_2_11s_cuda_12_build_and_vllms():
    refusal = driver_refusal(NodeDriver((12, 4), "550.54.15"), "13.0", TORCH_2_11, "/v/bin/python", vllm="0.24.0")
    assert refusal == (
        "this node's NVIDIA driver 550.54.15 supports CUDA up to 12.4, but torch 2.11.0 is built for CUDA 13.0, "
        "which needs driver 580 or newer: upgrade the driver, or install torch's CUDA 12 build: `/v/bin/python -m pip "
        "install torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0 --index-url https://download.pytorch.org/whl/"
        "cu126`; vLLM 0.24.0 then needs its CUDA 12 build too (its kernels are compiled for one torch build)"
    )
    cuda_11 = driver_refusal(NodeDriver((11, 4), "470.256.02"), "13.0", TORCH_2_11, "python")
    assert cuda_11.endswith("upgrade the driver (torch 2.11.0 has no CUDA 11 build)")
    unknown = driver_refusal(NodeDriver((12, 4), None), "13.0", {"torch": "2.99.0"}, "python")
    assert unknown.startswith("this node's NVIDIA driver supports CUDA up to 12.4")
    assert unknown.endswith(
        "or install torch 2.99.0's CUDA 12 build if PyTorch has one (https://pytorch.org/get-started/previous-versions/)"
    )


def stand_in_nvidia_smi(folder: Path, header: str | None, exit_code: int = 0) -> str:
    """A folder holding an ``nvidia-smi`` that prints ``header`` as a driver's does; PATH with it first."""
    folder.mkdir(exist_ok=True)
    script = folder / "nvidia-smi"
    printed = f"printf '%s\\n' '{RULE}' '{header}' '{RULE}'\n" if header else ""
    script.write_text(f"#!/bin/sh\n{printed}exit {exit_code}\n")
    script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.fixture
def torch_built_for(monkeypatch):
    """This process's torch as a CUDA build of torch 2.11.0 (None: the CPU build)."""
    import torch

    def built_for(cuda: str | None) -> None:
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch, "__version__", "2.11.0")

    return built_for


@pytest.mark.parametrize("driver_cuda", sorted(HEADERS))
def test_a_stand_in_nvidia_smi_of_each_major_refuses_only_a_newer_majors_torch(
    driver_cuda, tmp_path, monkeypatch, torch_built_for
):
    monkeypatch.setenv("PATH", stand_in_nvidia_smi(tmp_path / "bin", HEADERS[driver_cuda]))
    torch_built_for(None)
    check_node_driver()  # the CPU build: nothing to check
    for torch_cuda in ("11.8", "12.8", "13.0"):
        torch_built_for(torch_cuda)
        if int(torch_cuda.split(".")[0]) <= int(driver_cuda.split(".")[0]):
            check_node_driver()
            continue
        with pytest.raises(ConfigError, match=rf"supports CUDA up to {driver_cuda}, but torch 2\.11\.0 is built for"):
            check_node_driver()


def test_a_failing_or_absent_nvidia_smi_leaves_nothing_to_check(tmp_path, monkeypatch, torch_built_for):
    """A GPU-less head node: set-up's own GPU test puts an ``nvidia-smi`` that fails on PATH (exit 9)."""
    torch_built_for("13.0")
    monkeypatch.setenv("PATH", stand_in_nvidia_smi(tmp_path / "failing", HEADERS["12.4"], exit_code=9))
    check_node_driver()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    check_node_driver()


def test_the_dry_run_refuses_a_cuda_12_node_with_torch_built_for_cuda_13_in_one_line(
    tmp_path, monkeypatch, capsys, torch_built_for
):
    """``FSPO_DRY_RUN=1 fspo train``, in this process, on a node whose driver supports CUDA 12.4: today's driver
    would pass the dry run and fail in the Ray workers."""
    from fspo.training.main import main

    monkeypatch.setenv("PATH", stand_in_nvidia_smi(tmp_path / "bin", HEADERS["12.4"]))
    monkeypatch.setenv("FSPO_DRY_RUN", "1")
    monkeypatch.delenv("FSPO_PREFLIGHT", raising=False)
    monkeypatch.delenv("VERL_PLATFORM", raising=False)  # set by the CPU plugin when this process imported verl
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])
    torch_built_for("13.0")
    with pytest.raises(SystemExit) as stopped:
        main([f"actor_rollout_ref.model.path={tmp_path / 'model'}"])
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fspo: ")]
    assert lines[-1].startswith(
        "fspo: this node's NVIDIA driver 550.54.15 supports CUDA up to 12.4, but torch 2.11.0 is built for CUDA 13.0, "
        "which needs driver 580 or newer: upgrade the driver, or install torch's CUDA 12 build: "
    )


def test_set_ups_check_exits_2_with_one_line(tmp_path, monkeypatch, capsys, torch_built_for):
    """What ``scripts/setup.sh`` runs after installing (``python -m fspo.launch.cuda_driver``)."""
    from fspo.launch.cuda_driver import main

    assert "\npython -m fspo.launch.cuda_driver\n" in (REPO / "scripts" / "setup.sh").read_text()
    monkeypatch.setenv("PATH", stand_in_nvidia_smi(tmp_path / "bin", HEADERS["12.4"]))
    torch_built_for(None)
    assert main() == 0 and capsys.readouterr().err == ""
    torch_built_for("13.0")
    assert main() == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("fspo: this node's NVIDIA driver 550.54.15 supports CUDA up to 12.4, but torch 2.11.0 ")
