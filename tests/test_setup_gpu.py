"""The GPU install: scripts/setup.sh's GPU branch resolves to wheels, and which flash-attn wheel it picks.

The set-up's dry run (``FSPO_SETUP_DRY_RUN``) is run as on a GPU cluster's head node without a GPU (a stand-in
``nvidia-smi`` that fails, ``FSPO_SETUP_TARGET=gpu``): pip resolves what a GPU machine would install, in a
throwaway virtualenv, reading the CUDA wheels' metadata by HTTP range requests instead of downloading them. About three minutes, most of it pip asking the index about
~270 packages one after another.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.cli.flash_attn_wheel import (
    SHA256,
    TorchBuild,
    listed_wheels,
    major_minor,
    pick_wheel,
    python_tag,
    reported_torch_build,
    requirement,
    wheel_machine,
    wheel_python_tag,
)
from fspo_testing import background

REPO = Path(__file__).resolve().parent.parent

cuda_majors = st.sampled_from(["11", "12", "13"])
torch_versions = st.sampled_from(["2.8", "2.9", "2.10", "2.11"])
python_tags = st.sampled_from(["cp310", "cp311", "cp312"])
abis = st.booleans()
machines = st.sampled_from(["x86_64", "aarch64"])
platform_tags = st.sampled_from(["linux_{}", "manylinux_2_28_{}", "manylinux2014_{}"])


@st.composite
def wheel_entries(draw) -> dict:
    tag = draw(python_tags)
    platform = draw(platform_tags).format(draw(machines))
    return {
        "url": f"https://example.org/w/flash_attn-2.8.3-{tag}-{tag}-{platform}.whl",
        "sha256": draw(st.from_regex(SHA256, fullmatch=True)),
        "cuda": draw(cuda_majors),
        "torch": draw(torch_versions),
        "cxx11abi": draw(abis),
    }


@given(
    build=st.builds(
        TorchBuild,
        cuda=cuda_majors,
        torch=torch_versions,
        python=python_tags,
        cxx11abi=abis | st.none(),
        machine=machines,
    ),
    wheels=st.lists(wheel_entries(), max_size=6),
)
def test_a_wheel_is_picked_only_for_the_build_and_cpu_it_was_compiled_for(build, wheels):
    picked = pick_wheel(build, wheels)
    fits = [
        w
        for w in wheels
        if (w["cuda"], w["torch"], wheel_python_tag(w["url"])) == (build.cuda, build.torch, build.python)
        and w["url"].endswith(f"{build.machine}.whl")
        and build.cxx11abi in (None, w["cxx11abi"])
    ]
    assert picked == (fits[0] if fits else None)
    if picked:  # installed only with its file's hash
        assert requirement(picked) == f"flash-attn @ {picked['url']} --hash=sha256:{picked['sha256']}"


def test_an_aarch64_node_never_gets_an_x86_64_wheel_and_a_wheel_without_a_hash_is_not_installed():
    x86 = {
        "url": "https://h/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl",
        "sha256": "a" * 64,
        "cuda": "13",
        "torch": "2.11",
        "cxx11abi": True,
    }
    assert pick_wheel(TorchBuild("13", "2.11", "cp312", True, "aarch64"), [x86]) is None
    assert pick_wheel(TorchBuild("13", "2.11", "cp312", True, "x86_64"), [x86]) == x86
    assert wheel_machine("flash_attn-2.8.3-cp312-cp312-manylinux_2_28_aarch64.whl") == "aarch64"
    for sha256 in (None, "", "A" * 64, "a" * 63):
        with pytest.raises(ValueError, match="has no sha256"):
            requirement({**x86, "sha256": sha256})


def test_wheel_file_names_and_versions_are_read_as_pip_writes_them():
    assert wheel_python_tag("https://h/x/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl") == "cp312"
    assert wheel_python_tag("flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl") == "cp311"
    with pytest.raises(ValueError):
        wheel_python_tag("https://h/flash_attn-2.8.3.tar.gz")
    assert major_minor("2.11.0+cu130") == "2.11" and major_minor("2.13.0") == "2.13"


def _report(torch_requires: list[str]) -> dict:
    return {"install": [{"metadata": {"name": "torch", "version": "2.11.0", "requires_dist": torch_requires}}]}


def test_the_cuda_of_a_torch_to_be_installed_comes_from_the_nvidia_libraries_it_requires():
    cu13 = ['cuda-toolkit[cudart]==13.0.2; platform_system == "Linux"', "nvidia-cudnn-cu13==9.19.0.56"]
    assert reported_torch_build(_report(cu13), "cp312") == TorchBuild("13", "2.11", "cp312", None)
    cu12 = ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cudnn-cu12==9.10.2.21", "filelock"]
    assert reported_torch_build(_report(cu12), "cp311").cuda == "12"
    assert reported_torch_build(_report(["filelock", "sympy"]), "cp311") is None  # a CPU build
    assert reported_torch_build({"install": []}, "cp311") is None


def test_the_listed_wheels_are_wheels_for_a_gpu_python():
    wheels = listed_wheels(REPO / "pyproject.toml")
    assert wheels, "pyproject.toml lists no flash-attn wheel"
    for wheel in wheels:
        assert wheel_python_tag(wheel["url"]) in {"cp310", "cp311", "cp312"}, wheel["url"]
        assert wheel_machine(wheel["url"]) in {"x86_64", "aarch64"}, wheel["url"]
        assert set(wheel) == {"url", "sha256", "cuda", "torch", "cxx11abi"}
        assert requirement(wheel).endswith(f" --hash=sha256:{wheel['sha256']}")  # a hash pip can check


def _pinned_by_verl_vllm(verl_requires: list[str]) -> dict[str, str]:
    """``name -> version`` for each ``name==version; extra == "vllm"`` in verl's metadata."""
    pins = {}
    for line in verl_requires:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)\s*;\s*extra\s*==\s*['\"]vllm['\"]", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_the_cpu_install_pins_the_transformers_the_gpu_install_resolves():
    """One pin, in the project's dependencies: the version verl[vllm] pins for the GPU install. This install
    (the CPU one, CI's) has it, so the tests run HHEM's remote code, chat templates and Qwen3 on it."""
    import importlib.metadata

    try:
        import tomllib
    except ImportError:  # Python 3.10: the TOML reader pip vendors
        from pip._vendor import tomli as tomllib

    pins = _pinned_by_verl_vllm(importlib.metadata.requires("verl"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [
        requirement
        for requirements in (project["dependencies"], *project["optional-dependencies"].values())
        for requirement in requirements
        if re.match(r"transformers\b", requirement)
    ]
    assert declared == [f"transformers=={pins['transformers']}"]
    assert importlib.metadata.version("transformers") == pins["transformers"], "reinstall: pip install -e ."


def test_an_unknown_setup_target_is_refused_in_one_line_before_anything_is_installed(tmp_path):
    out = tmp_path / "dry-run"
    env = {**os.environ, "FSPO_SETUP_TARGET": "cuda", "FSPO_SETUP_DRY_RUN": str(out)}
    process = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True)
    assert process.returncode == 2
    assert process.stderr.strip().splitlines() == [
        "fspo: FSPO_SETUP_TARGET must be gpu or cpu (or unset: detect a GPU), got 'cuda'"
    ]
    assert not out.exists()


def gpu_install_dry_run(folder: Path) -> tuple[list[str], dict[str, str]]:
    """setup.sh's GPU branch as on a GPU cluster's head node without a GPU: a stand-in ``nvidia-smi`` that fails, and
    ``FSPO_SETUP_DRY_RUN`` (pip resolves, writes its reports under ``folder/dry-run`` and installs nothing)."""
    stand_in = folder / "bin"
    stand_in.mkdir()
    (stand_in / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (stand_in / "nvidia-smi").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stand_in}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "FSPO_SETUP_DRY_RUN": str(folder / "dry-run"),
        "FSPO_SETUP_TARGET": "gpu",
    }
    return ["timeout", "900", "bash", str(REPO / "scripts" / "setup.sh"), "test"], env


@pytest.mark.network
@pytest.mark.background.with_args(gpu_install_dry_run)  # it mostly waits on the index: it runs from collection on
def test_the_gpu_install_resolves_to_wheels_without_a_gpu(tmp_path):
    """setup.sh's GPU branch needs no compiler: every requirement is a wheel on the index, or a source
    package that builds into a pure-Python wheel in seconds; verl[vllm]'s pins hold; flash-attn is never
    built, only picked as a prebuilt wheel for this Python or left out."""
    process = background.result(gpu_install_dry_run, timeout_s=960)
    out = background.folder(gpu_install_dry_run) / "dry-run"
    assert process.returncode == 0, process.stderr[-3000:]
    flash_lines = [line for line in process.stderr.splitlines() if line.startswith("fspo: flash-attn:")]
    assert len(flash_lines) == 1, process.stderr[-3000:]

    report = json.loads((out / "project.json").read_text())
    installs = {item["metadata"]["name"].lower(): item for item in report["install"]}
    versions = {name: item["metadata"]["version"] for name, item in installs.items()}
    pins = _pinned_by_verl_vllm(installs["verl"]["metadata"]["requires_dist"])
    assert {"torch", "vllm", "transformers"} <= set(pins)
    assert {name: versions.get(name) for name in pins} == pins
    assert "flash-attn" not in installs and "flash_attn" not in installs

    sources = []
    for name, item in installs.items():
        download = item["download_info"]
        if download.get("dir_info", {}).get("editable"):
            assert name == "fspo"
        elif not download["url"].endswith(".whl"):
            sources.append(download["url"])
    for step in ("offline-assets",):
        for item in json.loads((out / f"{step}.json").read_text())["install"]:
            assert item["download_info"]["url"].endswith(".whl"), item["download_info"]["url"]
    # Each source package must build without torch, a compiler or minutes: into a pure-Python wheel.
    for url in sources:
        built = tmp_path / "built"
        subprocess.run(
            [str(out / "venv" / "bin" / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(built), url],
            check=True,
            timeout=180,
        )
        (wheel,) = [path.name for path in built.glob("*.whl")]
        assert wheel.endswith("-none-any.whl"), f"{url} builds into {wheel}, which is compiled"
        for path in built.iterdir():
            path.unlink()

    assert reported_torch_build(report, python_tag()) is not None, "the GPU branch resolved a torch without CUDA"
    picked = (out / "flash-attn.txt").read_text().strip()
    if picked:  # "flash-attn @ URL --hash=sha256:HEX"
        url = picked.split(" @ ", 1)[1].split(" --hash=")[0]
        assert wheel_python_tag(url) == python_tag() and url.endswith(".whl") and " --hash=sha256:" in picked
        assert "prebuilt for" in flash_lines[0]
    else:
        assert "installing without it" in flash_lines[0]
