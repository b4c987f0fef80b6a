"""Paths and numbers the launch scripts hand to Hydra: quoted so that any folder name reads back as given, and
checked by the environment door (fspo/config/environment.py) before bash or Hydra reads them.

Every recipe is dry-run (tests/test_recipes.py's ``run_recipe``) with its paths in one folder whose name holds
what Hydra's grammar would otherwise read: spaces, parentheses, ``=``, ``,``, both quotes and non-ASCII letters.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# pytest imports tests in importlib mode (no sibling imports): load test_recipes.py's helpers by path.
_spec = importlib.util.spec_from_file_location("recipe_dry_runs", Path(__file__).with_name("test_recipes.py"))
_recipe_dry_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipe_dry_runs)
REPO, RECIPES, printed_config, run_recipe, weights_env = (
    _recipe_dry_runs.REPO,
    _recipe_dry_runs.RECIPES,
    _recipe_dry_runs.printed_config,
    _recipe_dry_runs.run_recipe,
    _recipe_dry_runs.weights_env,
)
EVERY_RECIPE = sorted(path.name for path in RECIPES.glob("run_*.sh"))

# One folder name with every character Hydra's override grammar reads as syntax when unquoted, and letters
# outside ASCII.
ODD_NAME = "runs (copy) a=b,c 'q' \"d\" Zürich"


def quoted(values: list[str]) -> list[str]:
    """common.sh's fspo_quoted of each value, in one bash."""
    script = 'source "$1"; shift; for v in "$@"; do fspo_quoted "$v"; printf "\\0"; done'
    process = subprocess.run(
        ["bash", "-c", script, "bash", str(RECIPES / "common.sh"), *values],
        env={"FSPO_PRINT_OVERRIDE": "unused", "PATH": "/usr/bin:/bin"},  # sourced only: no check, nothing starts
        capture_output=True,
        check=True,
    )
    return process.stdout.decode("utf-8").split("\0")[:-1]


def read_back(value: str) -> str:
    """``key=value`` as Hydra parses it and OmegaConf then resolves it (what the composed config holds)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    parsed = OverridesParser.create().parse_override(f"key={value}").value()
    return OmegaConf.to_container(OmegaConf.create({"key": parsed}), resolve=True)["key"]


# Text a bash argument can hold (no NUL) and UTF-8 can encode (no lone surrogate).
ARGUMENT_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
SYNTAX_TEXT = st.text(st.sampled_from("\\'\"${}[](),= :a/ü"), max_size=12)


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.one_of(ARGUMENT_TEXT, SYNTAX_TEXT), min_size=1, max_size=12))
def test_a_quoted_value_reads_back_as_given(values):
    """Backslashes before a quote or ${, interpolations, brackets and quotes of both kinds come back unchanged; the
    Python rule (fspo.utils.hydra_values, the quickstart's and the twins' overrides) quotes as the bash one does."""
    from fspo.utils.hydra_values import hydra_quoted

    in_bash = quoted(values)
    assert [read_back(value) for value in in_bash] == values
    assert [hydra_quoted(value) for value in values] == in_bash


@pytest.fixture(scope="module")
def odd_paths(tmp_path_factory) -> dict[str, str]:
    """MODEL_PATH (a link to the tiny policy), CKPT_DIR, TRAIN_FILES and VAL_FILES, all in a folder named ODD_NAME."""
    folder = tmp_path_factory.mktemp("paths") / ODD_NAME
    folder.mkdir()
    (folder / "policy").symlink_to(weights_env()["MODEL_PATH"])
    return {
        "MODEL_PATH": str(folder / "policy"),
        "CKPT_DIR": str(folder / "ckpt"),
        "TRAIN_FILES": str(folder / "train.parquet"),  # not built: a dry run checks only files that exist
        "VAL_FILES": str(folder / "val, test.parquet"),
        "EXPERIMENT": ODD_NAME,
    }


@pytest.fixture(scope="module")
def odd_path_runs(odd_paths) -> dict[str, subprocess.CompletedProcess]:
    """Every recipe's dry run with odd_paths, two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(EVERY_RECIPE, pool.map(lambda name: run_recipe(name, **odd_paths), EVERY_RECIPE)))


@pytest.mark.parametrize("name", EVERY_RECIPE)
def test_every_recipe_hands_hydra_a_path_with_any_character_as_given(odd_path_runs, odd_paths, name):
    config = printed_config(odd_path_runs[name])
    assert config["actor_rollout_ref"]["model"]["path"] == odd_paths["MODEL_PATH"]
    assert config["trainer"]["default_local_dir"] == odd_paths["CKPT_DIR"]
    assert config["trainer"]["experiment_name"] == odd_paths["EXPERIMENT"]
    assert config["data"]["train_files"] == odd_paths["TRAIN_FILES"]
    assert config["data"]["val_files"] == odd_paths["VAL_FILES"]


def refusal(name: str, **env: str) -> str:
    """The one line a recipe exits 2 with, before Hydra starts."""
    env = {**os.environ, "FSPO_DRY_RUN": "1", "MODEL_PATH": "unused", **env}
    process = subprocess.run(["bash", str(RECIPES / name)], env=env, capture_output=True, text=True, timeout=60)
    assert process.returncode == 2, process.stderr[-2000:]
    assert "fspo.training.main" not in process.stderr  # refused before the launch
    return process.stderr.strip()


def test_a_recipe_refuses_a_bad_number_or_folder_in_one_line_before_it_launches(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    line = refusal("run_qwen2.5_7b_instruct.sh", CKPT_DIR=str(a_file))
    assert line.startswith("environment variable CKPT_DIR must be a folder (not a file), got '")
    assert line.endswith("a_file is a file, not a folder") and "\n" not in line
    line = refusal("run_qwen2.5_7b_instruct.sh", CKPT_DIR=str(a_file / "ckpt"))
    assert f"{a_file} is a file, so " in line
    assert refusal("run_qwen2.5_7b_instruct.sh", N_GPUS_PER_NODE=str(2**64)) == (
        f"environment variable N_GPUS_PER_NODE must be an integer in [1, 64], got '{2**64}'"
    )
    assert refusal("run_baseline_fapo.sh", FAPO_PENALTY="1e39").startswith(
        "environment variable FAPO_PENALTY must be a finite number >= 0"
    )
    # Empty, FSPO_CACHE would name the working folder (run_cpu.sh's SmolLM2 default, the quickstart's cache).
    assert refusal("run_cpu.sh", FSPO_CACHE="") == (
        "environment variable FSPO_CACHE must be a folder (not a file), got '': empty names the working folder: "
        "unset it or name a folder"
    )
    assert a_file.read_text() == "mine"


def test_every_variable_the_scripts_read_is_declared():
    """Every ${NAME} recipes/*.sh and evaluate/run.sh read from the environment is declared in the environment
    door or is one of the texts they pass on as given (names, lists, commands)."""
    import re

    from fspo.config.environment import ENVIRONMENT, SCRIPT_ENVIRONMENT, SCRIPT_VARIABLES

    texts = {  # passed on as given: a name, a Hydra list, a command, a choice fspo evaluate checks
        "MODEL_PATH", "TRAIN_FILES", "VAL_FILES", "PROJECT", "EXPERIMENT", "LOGGER", "PYTHON", "PYTHONPATH",
        "FSPO_PRINT_OVERRIDE", "RECIPE", "BENCHMARKS", "PROMPT_FORMAT", "VERIFIER", "JUDGE", "JUDGE_MODEL", "TOP_K",
    }  # fmt: skip
    scripts = {"recipes": sorted(RECIPES.glob("*.sh")), "evaluate": [REPO / "evaluate" / "run.sh"]}
    for group, paths in scripts.items():
        source = "\n".join(path.read_text() for path in paths)
        assigned = set(re.findall(r"^\s*(?:local\s+)?([A-Za-z_][A-Za-z0-9_]*)=\(", source, re.M))  # bash arrays
        read = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", source)) - {"BASH_SOURCE"} - assigned
        undeclared = read - texts - set(ENVIRONMENT) - set(SCRIPT_VARIABLES[group])
        assert undeclared == set(), group
        assert set(SCRIPT_VARIABLES[group]) <= set(SCRIPT_ENVIRONMENT)


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m fspo.training.main`` with ``overrides`` on a model that is not there: the config check fails
    (exit 2) after Hydra has written its run folder, or Hydra's run folder is refused first (exit 2)."""
    from fspo_testing.warm_python import warm_python

    absent = f"actor_rollout_ref.model.path={cwd / 'absent'}"
    flags = [arg for arg in overrides if arg.startswith("-")]  # Hydra's flags before the overrides (argparse)
    rest = [arg for arg in overrides if not arg.startswith("-")]
    command = [warm_python(), "-m", "fspo.training.main", *flags, "platform=cpu", absent, *rest]
    env = {key: value for key, value in os.environ.items() if key != "FSPO_DRY_RUN"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_hydras_run_folder_is_claimed_and_never_written_through_a_link(tmp_path):
    """fspo.launch.run_folder: a link at hydra.run.dir/.hydra is refused before Hydra writes (it replaced the
    user's config.yaml); a link planted inside the run's own earlier .hydra/ is deleted, not written through; the
    default dated folder is claimed like any output folder; a sweep is refused."""
    users = tmp_path / "users"
    users.mkdir()
    (users / "config.yaml").write_text("mine")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".hydra").symlink_to(users)
    process = train(tmp_path, f"hydra.run.dir={linked}")
    assert process.returncode == 2
    assert process.stderr.strip().splitlines()[-1] == (
        f"fspo: hydra.run.dir {linked}: .hydra is a symbolic link: fspo does not replace links; fspo replaces only "
        "what it wrote there (listed in .fspo-outputs.json): move it away or give another folder"
    )
    assert (users / "config.yaml").read_text() == "mine" and sorted(p.name for p in users.iterdir()) == ["config.yaml"]

    ours = tmp_path / "ours"
    assert (
        train(tmp_path, f"hydra.run.dir={ours}")
        .stderr.strip()
        .endswith("does not exist: fix the path (a Hugging Face model folder or hub id)")
    )
    (ours / ".hydra" / "config.yaml").unlink()
    (ours / ".hydra" / "config.yaml").symlink_to(users / "config.yaml")
    assert "does not exist" in train(tmp_path, f"hydra.run.dir={ours}").stderr
    assert (users / "config.yaml").read_text() == "mine"
    assert not (ours / ".hydra" / "config.yaml").is_symlink()

    assert train(tmp_path).returncode == 2
    (dated,) = (tmp_path / "outputs").glob("*/*")
    assert json.loads((dated / ".fspo-outputs.json").read_text())["written"] == {
        ".hydra/": "fspo train",
        "main.log": "fspo train",
    }
    sweep = train(tmp_path, "--multirun", "trainer.total_epochs=1,2")
    assert sweep.returncode == 2 and sweep.stderr.strip().splitlines()[-1].startswith(
        "fspo: --multirun is not supported"
    )


def test_evaluate_run_sh_never_writes_through_a_link_in_its_output_folder_and_checks_its_variables(tmp_path):
    """AIME's run writes OUTPUT_DIR/aime: a link there is refused before any fspo evaluate starts (it wrote
    through it), and a bad number or a data folder that is a file is one line naming the variable."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    (linked / "out").mkdir(parents=True)
    (linked / "out" / "aime").symlink_to(elsewhere)
    process = _recipe_dry_runs.run_evaluate_sh(linked, MAX_NEW_TOKENS="8", OUTPUT_DIR=str(linked / "out"))
    assert process.returncode == 2
    assert process.stderr.strip().splitlines()[-1] == (
        f"evaluate/run.sh: OUTPUT_DIR {linked / 'out'}: aime is a symbolic link: fspo writes nothing through a link "
        "inside its output folder; move it away or give another folder"
    )
    assert not any((linked / "calls").iterdir()) and not any(elsewhere.iterdir())

    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for name, variable, value, line in (
        ("nan", "TEMPERATURE", "nan", "environment variable TEMPERATURE must be a finite number >= 0, got 'nan'"),
        ("file", "DATA_DIR", str(a_file), "environment variable DATA_DIR must be a folder (not a file), got "),
    ):
        (tmp_path / name).mkdir()
        env = {variable: value, "MAX_NEW_TOKENS": "8", "OUTPUT_DIR": str(tmp_path / name / "out")}
        process = _recipe_dry_runs.run_evaluate_sh(tmp_path / name, **env)
        assert process.returncode == 2 and process.stderr.strip().startswith(line), process.stderr
        assert "\n" not in process.stderr.strip() and not any((tmp_path / name / "calls").iterdir())


def test_a_cache_folder_that_is_a_file_or_empty_is_named_as_such(tmp_path, monkeypatch, capsys):
    """--cache-dir FILE was 'not in the HF cache'; FSPO_CACHE='' converted SmolLM2 into the working folder."""
    from fspo.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["verifier", "download", "hhem", "--cache-dir", str(a_file)]) == 2
    assert capsys.readouterr().err == (
        f"fspo verifier download: --cache-dir {a_file} is a file, not a folder: give a folder to write into\n"
    )
    assert main(["verifier", "download", "hhem", "--cache-dir", ""]) == 2
    assert "--cache-dir is empty" in capsys.readouterr().err
    monkeypatch.setenv("FSPO_CACHE", "")
    # --steps 0 stops the old code too (argparse), in another line, before it converts or trains anything
    assert main(["quickstart", "--steps", "0", "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "fspo quickstart: environment variable FSPO_CACHE must be a folder (not a file), got '': empty names the "
        "working folder: unset it or name a folder\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_file"]


def test_a_checkpoint_folder_under_a_file_is_refused_by_the_dry_run(tmp_path):
    """trainer.default_local_dir given as an override is checked as CKPT_DIR is (verl failed at its first save)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    process = run_recipe("run_qwen2.5_7b_instruct.sh", f"trainer.default_local_dir={a_file / 'ckpt'}")
    assert process.returncode == 2
    assert process.stderr.strip().splitlines()[-1] == (
        f"fspo: trainer.default_local_dir: {a_file} is a file, so {a_file / 'ckpt'} cannot be a folder; give a "
        "folder for the checkpoints"
    )


def test_the_quickstarts_paths_read_back_as_given_from_any_folder(tmp_path):
    """`fspo quickstart --output-dir 'runs (copy)...'`: each path override it hands its trainer reads back as given
    (unquoted, Hydra refused the folder as a grammar error)."""
    from fspo.quickstart.cli import run_overrides

    odd = tmp_path / ODD_NAME
    setup = {"model": odd / "model", "train": odd / "data" / "train.parquet", "val": odd / "data" / "test.parquet"}
    overrides = dict(item.split("=", 1) for item in run_overrides(setup, odd, steps=2))
    paths = {
        "actor_rollout_ref.model.path": setup["model"],
        "data.train_files": setup["train"],
        "data.val_files": setup["val"],
        "trainer.default_local_dir": odd / "ckpt",
        "trainer.validation_data_dir": odd / "validation",
        "fspo.dump_dir": odd / "dump",
    }
    assert {key: read_back(overrides[key]) for key in paths} == {key: str(path) for key, path in paths.items()}
