"""Bad input gets one clear message naming the fix, before Ray starts."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from fspo_testing.warm_python import warm_python


def run_main(*overrides, env=None, cwd=None):
    return subprocess.run(
        [warm_python(), "-m", "fspo.training.main", *overrides], capture_output=True, text=True, env=env, cwd=cwd
    )


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo_testing.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("checks")
    write_parquet(make_rows(4, seed=0), root / "train.parquet")
    pd.DataFrame({"question": ["q"], "answer": ["a"]}).to_parquet(root / "bad.parquet")
    return build_tiny_model(root / "model"), root


def test_missing_model_path(model_and_data):
    _, root = model_and_data
    result = run_main("actor_rollout_ref.model.path=/nowhere/model", f"data.train_files={root / 'train.parquet'}")
    assert result.returncode == 2
    assert "actor_rollout_ref.model.path=/nowhere/model does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_data_file_without_required_columns(model_and_data):
    model, root = model_and_data
    result = run_main(f"actor_rollout_ref.model.path={model}", f"data.train_files={root / 'bad.parquet'}")
    assert result.returncode == 2
    assert "lacks the column(s) ['prompt', 'data_source', 'reward_model']" in result.stderr
    assert "fspo data" in result.stderr


def test_cpu_run_with_settings_it_cannot_honour(model_and_data):
    model, root = model_and_data
    result = run_main(
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'train.parquet'}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.actor.strategy=fsdp",
        "trainer.n_gpus_per_node=4",
    )
    assert result.returncode == 2
    for fragment in (
        "rollout.name=vllm needs a GPU; use `hf`",
        "must be fsdp2 on CPU",
        "raise ray_kwargs.ray_init.num_gpus",
    ):
        assert fragment in result.stderr


def test_unknown_verifier_is_named(model_and_data):
    model, root = model_and_data
    result = run_main(
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'train.parquet'}",
        "fspo.verifier.name=alignscore",
    )
    assert result.returncode == 2
    assert (
        "unknown fspo.verifier.name 'alignscore'; valid names: lexical, embedding, hhem, nli, llm_judge, minicheck, factcg"
        in result.stderr
    )


def test_dry_run_validates_without_files(model_and_data, tmp_path):
    import os

    env = {**os.environ, "FSPO_DRY_RUN": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    model, _ = model_and_data  # the model is checked (fspo.launch.preflight), the data may come later
    ok = run_main(f"actor_rollout_ref.model.path={model}", "data.train_files=later.parquet", env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "dry run OK" in ok.stderr and "adv_estimator: grpo" in ok.stdout
    assert list(tmp_path.iterdir()) == []  # "starts nothing": no Hydra outputs/<date>/<time>/main.log either
    offline = run_main(
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
        "data.train_files=later.parquet",
        env={**env, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": os.devnull},
        cwd=tmp_path,
    )
    assert (
        offline.returncode == 2
        and "HF_HUB_OFFLINE is set and Qwen/Qwen2.5-7B-Instruct is not in the HF cache" in offline.stderr
    )
    bad = run_main("actor_rollout_ref.model.path=x/y", "data.train_files=later.parquet", "fspo.thresold=0.3", env=env)
    assert bad.returncode != 0 and "thresold" in bad.stderr  # Hydra names the mistyped key


def test_separate_async_on_cpu_is_refused_before_ray_and_colocate_async_is_not(model_and_data):
    import os

    env = {**os.environ, "FSPO_DRY_RUN": "1"}
    common = (f"actor_rollout_ref.model.path={model_and_data[0]}", "data.train_files=later.parquet", "platform=cpu")
    refused = run_main(*common, "trainer.v1.trainer_mode=separate_async", env=env)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "trainer.v1.trainer_mode=separate_async needs" in refused.stderr and "Traceback" not in refused.stderr
    accepted = run_main(*common, "trainer.v1.trainer_mode=colocate_async", env=env)
    assert accepted.returncode == 0, accepted.stderr[-2000:]


def test_an_unknown_trainer_mode_is_named():
    from omegaconf import OmegaConf

    from fspo.config.vocabulary import ConfigError
    from fspo.training.config_checks import check_trainer_mode

    with pytest.raises(ConfigError, match="trainer.v1.trainer_mode=fully_async is unknown to FSPO; use one of sync"):
        check_trainer_mode(OmegaConf.create({"trainer": {"device": "cuda", "v1": {"trainer_mode": "fully_async"}}}))
    for mode in ("sync", "colocate_async"):
        check_trainer_mode(OmegaConf.create({"trainer": {"device": "cuda", "v1": {"trainer_mode": mode}}}))


@pytest.mark.parametrize(
    "backend, message",
    [
        (
            None,
            "sends weights to its rollout pool through a checkpoint engine other than naive: set "
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl and install cupy (`pip install cupy-cuda13x`)",
        ),
        (
            "nccl",
            "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl needs cupy (`pip install cupy-cuda13x`), "
            "which the `gpu` extra does not install (on every node), or use sync or colocate_async",
        ),
        ("mooncake", "backend=mooncake needs Mooncake's transfer engine (`pip install mooncake-transfer-engine`)"),
    ],
)
def test_separate_async_on_gpus_names_the_checkpoint_engine_package_it_lacks(backend, message):
    """verl's SeparateAsyncTrainer asserts a checkpoint engine other than naive, and each of those imports a
    transport package (cupy for nccl) that the `gpu` extra does not bring: refused before Ray starts."""
    import os

    if backend in (None, "nccl"):
        try:
            import cupy  # noqa: F401
        except ImportError:
            pass
        else:
            pytest.skip("cupy is installed here")
    env = {**os.environ, "FSPO_DRY_RUN": "1", "FSPO_PREFLIGHT": "0"}
    overrides = ["actor_rollout_ref.model.path=x/y", "data.train_files=later.parquet", "platform=gpu"]
    overrides += ["trainer.v1.trainer_mode=separate_async"]
    if backend:
        overrides.append(f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}")
    result = run_main(*overrides, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    last = [line for line in result.stderr.splitlines() if line.startswith("fspo: ")][-1]
    assert last.startswith("fspo: trainer.v1.trainer_mode=separate_async") and message in last, last
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.train_batch_size=-1", "data.train_batch_size=-1 must be a positive integer"),
        ("data.train_batch_size=0", "data.train_batch_size=0 must be a positive integer"),
        ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0 must be a positive integer"),
    ],
)
def test_a_non_positive_batch_size_is_named(override, message):
    import os

    env = {**os.environ, "FSPO_DRY_RUN": "1"}
    result = run_main("actor_rollout_ref.model.path=x/y", "data.train_files=later.parquet", override, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr
