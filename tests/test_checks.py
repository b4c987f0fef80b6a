"""Bad input gets one clear message naming the fix, before Ray starts."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest


def run_main(*overrides, env=None):
    return subprocess.run([sys.executable, "-m", "fspo.main", *overrides], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo.tiny_model import build_tiny_model

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
    for fragment in ("rollout.name=vllm needs a GPU; use `hf`", "must be fsdp2 on CPU", "raise ray_kwargs.ray_init.num_gpus"):
        assert fragment in result.stderr


def test_unknown_verifier_is_named(model_and_data):
    model, root = model_and_data
    result = run_main(f"actor_rollout_ref.model.path={model}", f"data.train_files={root / 'train.parquet'}",
                      f"data.val_files={root / 'train.parquet'}", "fspo.verifier.name=minicheck")
    assert result.returncode == 2
    assert "unknown fspo.verifier.name 'minicheck'; valid names: lexical, embedding, hhem, nli, llm_judge" in result.stderr


def test_dry_run_validates_without_files():
    import os

    env = {**os.environ, "FSPO_DRY_RUN": "1"}
    ok = run_main("actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct", "data.train_files=later.parquet", env=env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "dry run OK" in ok.stderr and "adv_estimator: grpo" in ok.stdout
    bad = run_main("actor_rollout_ref.model.path=x/y", "data.train_files=later.parquet", "fspo.thresold=0.3", env=env)
    assert bad.returncode != 0 and "thresold" in bad.stderr  # Hydra names the mistyped key


@pytest.mark.parametrize(
    "override, message",
    [("data.train_batch_size=-1", "data.train_batch_size=-1 must be a positive integer"),
     ("data.train_batch_size=0", "data.train_batch_size=0 must be a positive integer"),
     ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0 must be a positive integer")],
)
def test_a_non_positive_batch_size_is_named(override, message):
    import os

    env = {**os.environ, "FSPO_DRY_RUN": "1"}
    result = run_main("actor_rollout_ref.model.path=x/y", "data.train_files=later.parquet", override, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and "Traceback" not in result.stderr
