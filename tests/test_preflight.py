"""The weights check before Ray starts (fspo.launch.preflight), the HF variables every Ray process gets
(fspo.launch.hub_env), and platform=gpu from a GPU-less driver.

Models resolve from local folders, an HF cache built here, or a local stand-in for the hub's HTTP
interface (fspo_testing.hub_server): the real hub is not reachable from the test machines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.config.environment import EnvironmentVariableError
from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import ConfigError
from fspo.launch.hub_env import describe, hub_env_vars
from fspo.launch.preflight import (
    MODEL_FILES,
    TOKENIZER_FILES,
    HubProbe,
    ModelNeed,
    looks_like_hub_id,
    resolve,
    verifier_needs,
)
from fspo.verifiers.hhem import HHEM_FOUNDATION, HHEM_MODEL
from fspo_testing.hub_server import StandInHub
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parent.parent
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused at once


@pytest.fixture(scope="module")
def hhem_cache(tmp_path_factory):
    """Tiny HHEM in its published layout and its foundation, as folders and in an HF cache."""
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    return build_tiny_hhem_cache(tmp_path_factory.mktemp("hhem"))


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    from fspo_testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("policy") / "model")


def need(ref, files=MODEL_FILES + TOKENIZER_FILES, remote_code=False) -> ModelNeed:
    return ModelNeed("actor_rollout_ref.model.path", str(ref), files, f"hf download {ref}", remote_code)


@pytest.fixture
def online(monkeypatch):
    """This process as a node that may ask the hub (conftest makes tests offline; huggingface_hub read that
    at import)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


# --- one model: folder, cache, hub ------------------------------------------------------------------


def test_a_complete_local_folder_resolves_to_itself(policy):
    assert resolve(need(policy), HubProbe(CLOSED_PORT)) == str(policy)


def test_a_local_folder_without_weights_names_what_it_lacks(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"lacks model.safetensors or .*: fix the path"):
        resolve(need(tmp_path), HubProbe(CLOSED_PORT))


def test_a_sharded_folder_missing_a_shard_names_the_shard(policy, tmp_path):
    import json
    import shutil

    folder = shutil.copytree(policy, tmp_path / "sharded")
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    with pytest.raises(ConfigError, match="lacks model-00002-of-00002.safetensors"):
        resolve(need(folder), HubProbe(CLOSED_PORT))


@pytest.mark.parametrize("path", ["/no/such/model", "./models/missing", "~/nowhere/model", "a/b/c"])
def test_a_path_that_does_not_exist_says_so(path):
    with pytest.raises(ConfigError, match=f"={path} does not exist: fix the path"):
        resolve(need(path), HubProbe(CLOSED_PORT))


def test_a_remote_filesystem_path_is_left_to_verl():
    assert resolve(need("hdfs://namenode/models/qwen"), HubProbe(CLOSED_PORT)) == "hdfs://namenode/models/qwen"


def test_a_file_is_not_a_model_folder(policy):
    with pytest.raises(ConfigError, match=r"model.safetensors is a file: fix the path"):
        resolve(need(policy / "model.safetensors"), HubProbe(CLOSED_PORT))


def test_offline_and_not_cached_names_the_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as error:
        resolve(need("Qwen/Qwen2.5-7B-Instruct"), HubProbe(CLOSED_PORT), cache_dir=str(tmp_path))
    message = str(error.value)
    assert "HF_HUB_OFFLINE is set and Qwen/Qwen2.5-7B-Instruct is not in the HF cache" in message
    assert "`hf download Qwen/Qwen2.5-7B-Instruct`" in message and "\n" not in message


def test_offline_and_cached_resolves_to_the_snapshot(hhem_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    foundation = need(HHEM_FOUNDATION, (("config.json",),) + TOKENIZER_FILES)
    where = resolve(foundation, HubProbe(CLOSED_PORT), cache_dir=str(hhem_cache["cache"]))
    assert Path(where).parent.parent.name == "models--google--flan-t5-base"


def test_a_cache_without_the_remote_code_is_incomplete(hhem_cache, tmp_path, monkeypatch):
    from fspo_testing.tiny_model import put_in_hub_cache

    folder = tmp_path / "hhem"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((hhem_cache["hhem"] / name).read_bytes())
    put_in_hub_cache(tmp_path / "hub", HHEM_MODEL, folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"lacks configuration_hhem_v2.py, modeling_hhem_v2.py in the HF cache"):
        resolve(need(HHEM_MODEL, MODEL_FILES, remote_code=True), HubProbe(CLOSED_PORT), cache_dir=str(tmp_path / "hub"))


def test_an_unreachable_hub_fails_fast_naming_the_download(tmp_path, online):
    probe = HubProbe(CLOSED_PORT, timeout_s=5)
    started = time.monotonic()
    with pytest.raises(ConfigError) as error:
        resolve(need("Qwen/Qwen2.5-7B-Instruct"), probe, cache_dir=str(tmp_path))
    assert time.monotonic() - started < 5
    assert f"cannot reach the hub at {CLOSED_PORT}" in str(error.value)
    assert "pre-download it with `hf download Qwen/Qwen2.5-7B-Instruct`" in str(error.value)
    # The endpoint is remembered: a second model does not wait for the network again.
    assert probe.unreachable and probe.problem("google/flan-t5-base")[0] == "unreachable"


def test_an_unreachable_hub_with_a_complete_cache_passes(hhem_cache, online):
    # huggingface_hub falls back to the cache when the hub cannot be reached; so does the check.
    foundation = need(HHEM_FOUNDATION, (("config.json",),) + TOKENIZER_FILES)
    assert "snapshots" in resolve(foundation, HubProbe(CLOSED_PORT), cache_dir=str(hhem_cache["cache"]))


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_a_hub_outage_or_rate_limit_falls_back_to_a_complete_cache(hhem_cache, tmp_path, online, status):
    # huggingface_hub loads from the cache when the hub answers 5xx or 429; a fully cached run must start.
    foundation = need(HHEM_FOUNDATION, (("config.json",),) + TOKENIZER_FILES)
    with StandInHub({}, outage=status) as hub:
        probe = HubProbe(hub.endpoint, token="hf_granted")
        assert "snapshots" in resolve(foundation, probe, cache_dir=str(hhem_cache["cache"]))
        with pytest.raises(ConfigError) as error:  # not cached: the download command, not "check HF_TOKEN"
            resolve(need("Qwen/Qwen2.5-7B-Instruct"), probe, cache_dir=str(tmp_path))
        assert hub.requests == [f"/{HHEM_FOUNDATION}/resolve/main/config.json"]  # the outage is asked about once
    message = str(error.value)
    assert f"cannot reach the hub at {hub.endpoint} (it answers HTTP {status})" in message
    assert "`hf download Qwen/Qwen2.5-7B-Instruct`" in message and "HF_TOKEN" not in message


def test_an_hhem_server_restarted_during_an_outage_passes_its_check(hhem_cache):
    """Each HHEM server checks its weights on its node with the same function (load_hhem -> check_verifier):
    a server Ray restarts while the hub answers 503 finds the cached HHEM and foundation."""
    code = (
        "from fspo.config.verifier import VerifierConfig\n"
        "from fspo.launch.preflight import check_verifier\n"
        "print(check_verifier(VerifierConfig(name='hhem')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    with StandInHub({}, outage=503) as hub:
        env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=str(hhem_cache["cache"]), PYTHONPATH=str(REPO))
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("snapshots") == 2
    assert ("HEAD", f"/{HHEM_MODEL}/resolve/main/config.json", "") in hub.calls  # it asked the hub first


def test_the_hub_says_gated_not_found_or_not_a_model(hhem_cache, tmp_path, online):
    empty = tmp_path / "empty"
    empty.mkdir()
    with StandInHub(
        {HHEM_MODEL: hhem_cache["hhem"], "org/no-config": empty}, gated={HHEM_MODEL}, granted={"hf_granted"}
    ) as hub:
        cache = str(tmp_path / "cache")
        hhem = need(HHEM_MODEL, MODEL_FILES, remote_code=True)
        with pytest.raises(
            ConfigError, match=rf"is gated: accept its terms at {hub.endpoint}/{HHEM_MODEL}, then set HF_TOKEN"
        ):
            resolve(hhem, HubProbe(hub.endpoint, token=""), cache)
        with pytest.raises(ConfigError, match="your HF_TOKEN's account has not been granted access: accept its terms"):
            resolve(hhem, HubProbe(hub.endpoint, token="hf_other"), cache)
        assert resolve(hhem, HubProbe(hub.endpoint, token="hf_granted"), cache) == f"{hub.endpoint}/{HHEM_MODEL}"
        with pytest.raises(ConfigError, match=f"org/missing is not on {hub.endpoint} or not visible"):
            resolve(need("org/missing"), HubProbe(hub.endpoint, token=""), cache)
        with pytest.raises(ConfigError, match="has no config.json on the hub: it is not a model repo"):
            resolve(need("org/no-config"), HubProbe(hub.endpoint, token=""), cache)


# --- what each backend loads --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lexical", "llm_judge"])
def test_backends_without_weights_need_nothing(name):
    assert verifier_needs(VerifierConfig(name=name)) == []


def test_hhem_needs_its_checkpoint_and_the_foundation_its_remote_code_loads(tmp_path):
    needs = verifier_needs(VerifierConfig(name="hhem"), cache_dir=str(tmp_path))
    assert [(n.key, n.ref, n.remote_code) for n in needs] == [
        ("fspo.verifier.model_path", HHEM_MODEL, True),
        ("fspo.verifier.model_path's config.foundation", HHEM_FOUNDATION, False),
    ]
    assert needs[1].files == (("config.json",),) + TOKENIZER_FILES  # flan-t5's config and tokenizer, no weights
    assert not verifier_needs(VerifierConfig(name="hhem", trust_remote_code=False), cache_dir=str(tmp_path))[
        0
    ].remote_code
    # Without the remote code and with a tokenizer of its own, the T5 fallback reads only the foundation's config.
    own = verifier_needs(VerifierConfig(name="hhem", trust_remote_code=False, tokenizer_path="org/tok"), str(tmp_path))
    assert [(n.ref, n.files) for n in own] == [
        ("org/tok", TOKENIZER_FILES),
        (HHEM_MODEL, (("config.json",), ("model.safetensors",))),
        (HHEM_FOUNDATION, (("config.json",),)),
    ]
    assert own[0].download == "fspo verifier download hhem --tokenizer-path org/tok"


def test_a_bare_t5_verifier_folder_needs_nothing_else(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    needs = verifier_needs(VerifierConfig(name="hhem", model_path=str(tmp_path)))
    assert [n.ref for n in needs] == [str(tmp_path)]


def test_embedding_checks_the_packaged_minilm_and_nli_its_model(policy):
    from fspo.launch.preflight import minilm_path

    assert [n.ref for n in verifier_needs(VerifierConfig(name="embedding"))] == [minilm_path()]
    resolve(verifier_needs(VerifierConfig(name="embedding"))[0], HubProbe(CLOSED_PORT))  # the package is complete
    nli = verifier_needs(VerifierConfig(name="nli", model_path=str(policy), tokenizer_path="org/tok"))
    assert [(n.key, n.ref) for n in nli] == [
        ("fspo.verifier.tokenizer_path", "org/tok"),
        ("fspo.verifier.model_path", str(policy)),
    ]


@pytest.mark.parametrize(
    "name, default",
    [
        ("minicheck", "lytang/MiniCheck-Flan-T5-Large"),
        ("factcg", "yaxili96/FactCG-DeBERTa-v3-Large"),
    ],
)
def test_the_fact_checkers_check_their_default_checkpoint(name, default):
    needs = verifier_needs(VerifierConfig(name=name))
    assert [need.ref for need in needs] == [default]
    assert needs[0].download == f"fspo verifier download {name}"


@given(
    st.text(min_size=1).map(lambda tail: "/" + tail)
    | st.text().map(lambda tail: "./" + tail)
    | st.text().map(lambda tail: "~/" + tail)
    | st.tuples(st.text(), st.text(), st.text()).map("/".join)
)
def test_a_path_is_never_taken_for_a_hub_id(path):
    assert not looks_like_hub_id(path)


NAME = st.from_regex(r"[A-Za-z0-9]+([-_.][A-Za-z0-9]+){0,3}", fullmatch=True).filter(lambda name: len(name) <= 40)


@given(NAME, NAME)
def test_an_org_and_name_is_a_hub_id(org, name):
    assert looks_like_hub_id(f"{org}/{name}")


# --- the HF variables in every Ray process --------------------------------------------------------


ENV_NAME = st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True) | st.sampled_from(
    ["HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN", "TRANSFORMERS_OFFLINE", "PATH", "HOME"]
)


@given(st.dictionaries(ENV_NAME, st.text(max_size=5)))
def test_only_set_hugging_face_variables_are_passed_and_never_the_token(environ):
    env = hub_env_vars(environ)
    assert env == {
        k: v
        for k, v in environ.items()
        if v
        and (k.startswith("HF_") or k in ("HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE"))
        and k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    }
    for has_token in (False, True):
        for cluster in (None, "10.0.0.1:6379"):
            lines = describe(env, has_token, cluster)
            # The variables by name only, then where the token comes from: the same words whatever it is.
            passing = [f"fspo: passing {', '.join(sorted(env))} to every Ray process"] if env else []
            assert lines == passing + describe({}, has_token, cluster)
            assert (len(describe({}, has_token, cluster)) == 1) == has_token
            assert all(line.startswith("fspo: ") and "\n" not in line for line in lines)


def test_a_run_that_joins_a_cluster_is_told_from_one_that_starts_its_own(monkeypatch):
    """Only a Ray the run starts inherits the driver's token; a joined cluster's nodes use their own."""
    from fspo.training.main import joined_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = OmegaConf.create({"ray_kwargs": {"ray_init": {"address": None}}})
    assert joined_cluster(config) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert joined_cluster(config) == "10.0.0.1:6379"
    config.ray_kwargs.ray_init.address = "10.0.0.2:6379"
    assert joined_cluster(config) == "10.0.0.2:6379"
    assert "their node's (HF_TOKEN where `ray start` ran" in describe({}, True, "10.0.0.2:6379")[0]


def test_a_run_that_joins_a_cluster_leaves_its_size_to_the_cluster(monkeypatch, capsys):
    """ray.init refuses num_cpus and num_gpus when it joins a cluster: the CPU preset's (and a SLURM user's
    num_cpus) are dropped there, and kept for a Ray the run starts. The suite's trainer runs join a cluster
    (fspo_testing/shared_ray.py) with the CPU preset, so ray.init itself checks the joined case end to end."""
    from fspo.training.main import CLUSTER_SIZE_KEYS, sized_by_the_cluster_it_joins

    def preset():
        return OmegaConf.create({"ray_kwargs": {"ray_init": {"address": None, "num_cpus": 16, "num_gpus": 1}}})

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = preset()
    sized_by_the_cluster_it_joins(config)
    assert config == preset() and capsys.readouterr().err == ""
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    sized_by_the_cluster_it_joins(config)
    assert all(config.ray_kwargs.ray_init.get(key) is None for key in CLUSTER_SIZE_KEYS)
    assert capsys.readouterr().err == (
        "fspo: joining the Ray cluster at 10.0.0.1:6379: its own resources count, not "
        "ray_kwargs.ray_init.num_cpus, ray_kwargs.ray_init.num_gpus\n"
    )


def test_a_token_never_travels_in_a_runtime_env():
    from fspo.launch.hub_env import with_env_vars
    from fspo.training.main import FSPOTaskRunner

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        with pytest.raises(ValueError, match=f"{name} must not travel in a Ray runtime env"):
            with_env_vars(FSPOTaskRunner, {"HF_HOME": "/h", name: "hf_x"})


def test_a_stored_login_token_stays_in_its_file(tmp_path, monkeypatch):
    from fspo.launch.hub_env import driver_has_token

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))  # where `hf auth login` writes it
    assert not driver_has_token()
    (tmp_path / "token").write_text("hf_stored_login")
    assert driver_has_token() and "hf_stored_login" not in str(hub_env_vars())


def test_the_workers_of_a_ray_the_driver_starts_inherit_its_token_and_the_runtime_env_its_settings(tmp_path):
    """The token reaches a local cluster's workers through the environment Ray's processes inherit from
    the driver; the other settings (which a cluster started elsewhere lacks) through the runtime env."""
    script = tmp_path / "child_env.py"
    script.write_text(
        "import os, ray\n"
        "from fspo.launch.hub_env import with_env_vars\n"
        "ray.init(num_cpus=2, include_dashboard=False, logging_level='ERROR', log_to_driver=False)\n"
        "os.environ['HF_ENDPOINT'] = 'http://set-after-ray-started'\n"
        "@ray.remote(num_cpus=0)\n"
        "class Child:\n"
        "    def env(self):\n"
        "        return os.environ.get('HF_ENDPOINT'), os.environ.get('HF_TOKEN')\n"
        "@ray.remote(num_cpus=0)\n"
        "class Runner:\n"
        "    def run(self):\n"
        "        return ray.get(Child.remote().env.remote())\n"
        "print('plain', ray.get(Runner.remote().run.remote()))\n"
        "runner = with_env_vars(Runner, {'HF_ENDPOINT': 'http://mirror'})\n"
        "print('with', ray.get(runner.remote().run.remote()))\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_ENDPOINT", "HF_TOKEN")}
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**env, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", "HF_TOKEN": "hf_from_the_driver"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "plain (None, 'hf_from_the_driver')" in done.stdout
    assert "with ('http://mirror', 'hf_from_the_driver')" in done.stdout


# --- platform=gpu from a machine without a GPU ---------------------------------------------------


def test_platform_gpu_without_an_accelerator_pins_cuda_here_and_in_ray(monkeypatch):
    from fspo.training.main import with_platform_default

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    monkeypatch.setattr("fspo.training.main.cpu_mode_requested", lambda: True)  # this machine has no GPU
    argv = with_platform_default(["platform=gpu", "trainer.nnodes=2"])
    assert argv == [
        "platform=gpu",
        "trainer.nnodes=2",
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM=nvidia",
    ]
    assert os.environ["VERL_PLATFORM"] == "nvidia"
    # Given twice, the key is not appended again (Hydra would refuse the duplicate).
    assert with_platform_default(argv) == argv
    monkeypatch.delenv("VERL_PLATFORM")
    assert with_platform_default(["platform=gpu", "platform=cpu"]) == ["platform=gpu", "platform=cpu"]
    assert "VERL_PLATFORM" not in os.environ


def test_platform_gpu_on_a_gpu_machine_changes_nothing(monkeypatch):
    from fspo.training.main import with_platform_default

    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    monkeypatch.setattr("fspo.training.main.cpu_mode_requested", lambda: False)
    assert with_platform_default(["platform=gpu"]) == ["platform=gpu"]
    assert "VERL_PLATFORM" not in os.environ


# --- the recipe's dry run ----------------------------------------------------------------------------


def dry_run_recipe(*overrides: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    full_env.update(FSPO_DRY_RUN="1", PYTHON=warm_python(), **env)
    started = time.monotonic()
    process = subprocess.run(
        ["bash", str(REPO / "recipes" / "run_qwen2.5_7b_instruct.sh"), *overrides],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return process, time.monotonic() - started


def fspo_lines(process: subprocess.CompletedProcess) -> list[str]:
    return [line for line in process.stderr.splitlines() if line.startswith("fspo: ")]


def test_the_recipe_dry_run_stops_within_30_s_when_hhem_cannot_be_had(policy, tmp_path):
    """Within 30 s on an idle machine (~15 s here, nearly all of it importing verl and torch). On a busy test
    machine the bound is relative: the weights check adds seconds to a dry run that stops at a config error."""
    process, seconds = dry_run_recipe(
        MODEL_PATH=str(policy), HF_HUB_CACHE=str(tmp_path), HF_ENDPOINT=CLOSED_PORT, HF_TOKEN="hf_secret_value_42"
    )
    assert process.returncode == 2, process.stderr[-2000:]
    if seconds >= 30:
        config_error, baseline = dry_run_recipe("fspo.flip=maybe", MODEL_PATH=str(policy))
        assert config_error.returncode == 2 and seconds < baseline + 10, (seconds, baseline)
    last = fspo_lines(process)[-1]
    assert last.startswith(f"fspo: fspo.verifier.model_path: cannot reach the hub at {CLOSED_PORT}")
    assert "`fspo verifier download hhem`" in last and "Traceback" not in process.stderr
    assert "hf_secret_value_42" not in process.stdout + process.stderr


def test_the_recipe_dry_run_passes_with_a_local_hhem_folder_and_a_cached_foundation(policy, hhem_cache):
    process, _ = dry_run_recipe(
        f"fspo.verifier.model_path={hhem_cache['hhem']}",
        MODEL_PATH=str(policy),
        HF_HUB_CACHE=str(hhem_cache["cache"]),
        HF_HUB_OFFLINE="1",
        HF_TOKEN="hf_secret_value_42",
    )
    assert process.returncode == 0, process.stderr[-2000:]
    found = [line for line in fspo_lines(process) if line.startswith("fspo: models found:")]
    assert len(found) == 1 and f"fspo.verifier.model_path: {hhem_cache['hhem']}" in found[0]
    assert "models--google--flan-t5-base" in found[0]
    passing = [line for line in fspo_lines(process) if line.startswith("fspo: passing ")]
    assert len(passing) == 1 and passing[0].endswith(" to every Ray process")
    passed = set(passing[0].split(" ", 2)[2].split(" to ")[0].split(", "))
    assert {"HF_HUB_CACHE", "HF_HUB_OFFLINE"} <= passed and "HF_TOKEN" not in passed
    assert "fspo: the Hugging Face token reaches Ray's processes through this process's environment" in fspo_lines(
        process
    )
    assert "hf_secret_value_42" not in process.stdout + process.stderr  # not in the printed config either
    assert "VERL_PLATFORM: nvidia" in process.stdout  # platform=gpu from this GPU-less machine


def test_the_recipe_dry_run_passes_during_a_hub_outage_with_everything_cached(policy, tmp_path):
    from fspo_testing.tiny_model import build_tiny_hhem_cache, put_in_hub_cache

    cache = build_tiny_hhem_cache(tmp_path)["cache"]
    put_in_hub_cache(cache, "Qwen/Qwen2.5-7B-Instruct", policy)  # the recipe's default MODEL_PATH, cached
    with StandInHub({}, outage=503) as hub:
        process, _ = dry_run_recipe(HF_HUB_CACHE=str(cache), HF_ENDPOINT=hub.endpoint)
    assert process.returncode == 0, process.stderr[-2000:]
    assert any(path.endswith("/resolve/main/config.json") for path in hub.requests), "it did not ask the hub"
    found = [line for line in fspo_lines(process) if line.startswith("fspo: models found:")]
    assert len(found) == 1 and found[0].count("snapshots") == 3  # policy, HHEM, HHEM's foundation


def test_the_recipe_dry_run_names_a_missing_foundation_offline(policy, tmp_path):
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    paths = build_tiny_hhem_cache(tmp_path, with_foundation=False)
    process, _ = dry_run_recipe(MODEL_PATH=str(policy), HF_HUB_CACHE=str(paths["cache"]), HF_HUB_OFFLINE="1")
    assert process.returncode == 2, process.stderr[-2000:]
    assert fspo_lines(process)[-1] == (
        f"fspo: fspo.verifier.model_path's config.foundation: HF_HUB_OFFLINE is set and {HHEM_FOUNDATION} is not in "
        f"the HF cache ({paths['cache']}): pre-download it where the hub is reachable with `fspo verifier download "
        "hhem` into the cache this node reads (HF_HOME / HF_HUB_CACHE), or point the key at a local folder"
    )
    assert "Traceback" not in process.stderr


OFFLINE_VALUE = st.none() | st.sampled_from(["", "0", "1", "true", "TRUE", "on", "Yes", "no", " 1", "2"])


@given(OFFLINE_VALUE, OFFLINE_VALUE)
def test_offline_is_read_as_huggingface_hub_reads_it(hub_offline_value, transformers_offline_value):
    """``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` as huggingface_hub reads them when it is imported
    (``HF_HUB_OFFLINE=0`` wins over ``TRANSFORMERS_OFFLINE=1``), or refused (fspo.config.environment) where the
    hub would take a word outside its true words and their opposites (``2``, `` 1``) for off."""
    import importlib

    from huggingface_hub import constants

    from fspo.launch.preflight import hub_offline

    saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    try:
        for name, value in zip(saved, (hub_offline_value, transformers_offline_value)):
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        try:
            offline = hub_offline()
        except EnvironmentVariableError:
            values = [v for v in (hub_offline_value, transformers_offline_value) if v]
            assert values[0].lower() not in ("0", "1", "true", "false", "on", "off", "yes", "no")
            return
        assert offline == importlib.reload(constants).HF_HUB_OFFLINE
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        importlib.reload(constants)


def test_fspo_preflight_0_skips_the_check(monkeypatch):
    from fspo.launch.preflight import preflight_requested

    assert preflight_requested()
    monkeypatch.setenv("FSPO_PREFLIGHT", "0")
    assert not preflight_requested()


def test_the_preflight_of_a_cpu_run_with_a_lexical_verifier_reads_only_the_policy(policy):
    from fspo.config.fspo_config import fspo_config
    from fspo.launch.preflight import preflight

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(policy)}},
            "algorithm": {"adv_estimator": "grpo"},
            "critic": {"enable": None},
            "fspo": {"enable": True, "verifier": {"name": "lexical"}},
        }
    )
    assert preflight(config, fspo_config(config)) == [f"actor_rollout_ref.model.path: {policy}"]
    config.fspo.verifier.name = "embedding"  # the packaged MiniLM, a local folder
    assert len(preflight(config, fspo_config(config))) == 2


# --- the driver's own install: verl starts its task runner here ----------------------------------------------


@pytest.mark.parametrize("rollout", ["vllm", "sglang", "hf"])
def test_a_driver_without_the_rollout_backend_is_refused_in_one_line(rollout, monkeypatch):
    """verl's task runner imports the rollout backend and Ray starts it on the driver's node (a GPU-less head
    node too): a driver that cannot import it is refused before Ray starts, naming the install."""
    import importlib.util

    from fspo.launch.preflight import check_rollout_importable

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(  # this machine as a head node with the CPU set: no vLLM, no SGLang
        importlib.util, "find_spec", lambda name, *a: None if name in ("vllm", "sglang") else real_find_spec(name, *a)
    )
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": rollout}}})
    if rollout == "hf":
        check_rollout_importable(config)
        return
    with pytest.raises(ConfigError) as refused:
        check_rollout_importable(config)
    message = str(refused.value)
    assert "\n" not in message
    assert f"rollout.name={rollout} but {rollout} is not installed here" in message
    assert "FSPO_SETUP_TARGET=gpu bash scripts/setup.sh" in message
