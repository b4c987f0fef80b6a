"""The CPU backend's pieces that run without Ray: platform, patches, sampling helpers, batching."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import torch

from fspo.coalesce import Coalescer
from fspo.cpu.patches import normalise_backend
from fspo.cpu.rollout import SamplingSettings, generate_batch, left_pad, sampling_settings, trim_at_stop


def test_plugin_loads_and_verl_picks_the_cpu_platform():
    # A fresh process, as verl's Ray workers are: importing verl must load the plugin.
    code = (
        "import verl\n"
        "from fspo.cpu.plugin import STATE\n"
        "from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device\n"
        "assert STATE['active'] and STATE['error'] is None, STATE\n"
        "print(get_device_name(), get_nccl_backend(), get_torch_device().current_device())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "gloo", "cpu"]


def test_plugin_stays_off_when_another_platform_is_asked_for():
    code = "import verl\nfrom fspo.cpu.plugin import STATE\nprint(STATE['active'])\n"
    env = {"VERL_PLATFORM": "nvidia", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().endswith("False")


def test_gloo_process_group_initialises_with_verls_backend_string():
    import socket

    with socket.socket() as probe:  # a free port: a fixed one can clash on a shared machine
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = (
        "import verl, torch.distributed as dist\n"
        "from verl.utils.distributed import initialize_global_process_group_ray\n"
        f"import os; os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='{port}', RANK='0', WORLD_SIZE='1')\n"
        "initialize_global_process_group_ray()\n"
        "print(dist.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("gloo")


@pytest.mark.parametrize(
    ("backend", "expected"),
    [("cpu:gloo,cpu:gloo", "gloo"), ("cpu:gloo,cuda:nccl", "cpu:gloo,cuda:nccl"), ("nccl", "nccl"), (None, None)],
)
def test_normalise_backend(backend, expected):
    assert normalise_backend(backend) == expected


def test_sampling_settings_follow_verls_vllm_server_budget():
    settings = sampling_settings(
        {"temperature": 0.7, "top_k": -1}, prompt_len=100, prompt_length=128, response_length=64, max_model_len=192
    )
    assert settings == SamplingSettings(max_new_tokens=64, temperature=0.7, top_p=1.0, top_k=0)
    # The context left caps the budget.
    assert sampling_settings({}, 180, 128, 64, 192).max_new_tokens == 12
    with pytest.raises(ValueError, match="max_model_len"):
        sampling_settings({}, 192, 128, 64, 192)


def test_left_pad_and_trim():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert trim_at_stop([1, 2, 9, 3], {9}) == ([1, 2, 9], True)
    assert trim_at_stop([1, 2], {9}) == ([1, 2], False)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from fspo_testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(path)


def test_batched_generation_matches_one_by_one_when_greedy(tiny_lm):
    prompts = [[100, 200, 300], [400], [500, 600]]
    settings = SamplingSettings(max_new_tokens=6, temperature=0.0, logprobs=True)
    batched = generate_batch(tiny_lm, prompts, settings, pad_id=0, stop_ids=set())
    for prompt, (tokens, logprobs) in zip(prompts, batched):
        single, _ = generate_batch(tiny_lm, [prompt], settings, pad_id=0, stop_ids=set())[0]
        assert tokens == single
        assert len(logprobs) == len(tokens) and all(lp <= 0 for lp in logprobs)


def _actor_logits(model, prompt, tokens):
    """The next-token logits at each response position, as verl's actor computes them (one forward)."""
    with torch.no_grad():
        return model(torch.tensor([prompt + tokens])).logits[0].float()[len(prompt) - 1 : -1]


def _sampled(logprobs_of_vocab, tokens):
    return logprobs_of_vocab.gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_logprobs_are_of_the_distribution_sampled_from_as_vllms_processed_logprobs(tiny_lm):
    # verl's actor computes log_softmax(logits / T); vLLM (logprobs_mode=processed_logprobs, verl's
    # default) reports the log-prob after temperature and top-k/top-p, so at T=0.7 the two agree.
    prompt = [11, 22, 33]
    torch.manual_seed(0)
    settings = SamplingSettings(max_new_tokens=6, temperature=0.7, logprobs=True)
    ((tokens, logprobs),) = generate_batch(tiny_lm, [prompt], settings, 0, set())
    logits = _actor_logits(tiny_lm, prompt, tokens)
    expected = _sampled(torch.log_softmax(logits / 0.7, -1), tokens)
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
    # With top-k the tokens outside the k best are cut before the softmax.
    settings = SamplingSettings(max_new_tokens=6, temperature=0.7, top_k=5, logprobs=True)
    ((tokens, logprobs),) = generate_batch(tiny_lm, [prompt], settings, 0, set())
    scaled = _actor_logits(tiny_lm, prompt, tokens) / 0.7
    kept = scaled.masked_fill(scaled < scaled.topk(5, dim=-1).values[:, -1:], float("-inf"))
    assert torch.allclose(torch.tensor(logprobs), _sampled(torch.log_softmax(kept, -1), tokens), atol=1e-4)


def test_raw_logprobs_mode_reports_the_models_unscaled_logprobs(tiny_lm):
    prompt = [11, 22, 33]
    settings = SamplingSettings(max_new_tokens=4, temperature=0.7, logprobs=True, logprobs_mode="raw_logprobs")
    ((tokens, logprobs),) = generate_batch(tiny_lm, [prompt], settings, 0, set())
    expected = _sampled(torch.log_softmax(_actor_logits(tiny_lm, prompt, tokens), -1), tokens)
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
    with pytest.raises(ValueError, match="logprobs_mode='processed_logits'"):
        sampling_settings({}, 10, 128, 64, 192, logprobs_mode="processed_logits")


def test_coalescer_batches_concurrent_submissions_and_splits_results():
    calls = []

    def double(key, items):
        calls.append((key, list(items)))
        return [2 * item for item in items]

    async def main():
        coalescer = Coalescer(double, window_s=0.01)
        results = await asyncio.gather(
            coalescer.submit([1, 2], key="a"), coalescer.submit([3], key="a"), coalescer.submit([4], key="b")
        )
        return [r for r, _ in results], coalescer

    results, coalescer = asyncio.run(main())
    assert results == [[2, 4], [6], [8]]
    assert sorted(calls) == [("a", [1, 2, 3]), ("b", [4])]
    assert coalescer.calls == 2


def test_coalescer_delivers_errors_to_every_caller():
    def boom(key, items):
        raise RuntimeError("model fell over")

    async def main():
        coalescer = Coalescer(boom, window_s=0.01)
        return await asyncio.gather(coalescer.submit([1]), coalescer.submit([2]), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) for r in results)


def test_coalescer_splits_by_max_items():
    sizes = []

    async def main():
        coalescer = Coalescer(lambda key, items: sizes.append(len(items)) or items, window_s=0.01, max_items=3)
        return await asyncio.gather(*(coalescer.submit([i, i]) for i in range(4)))

    asyncio.run(main())
    assert sum(sizes) == 8 and max(sizes) <= 3
