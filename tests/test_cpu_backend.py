"""The CPU backend's pieces that run without Ray: platform, patches, sampling helpers, batching."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from fspo.cpu import rollout
from fspo.cpu.agent_loop import sample_seed
from fspo.cpu.patches import normalise_backend
from fspo.cpu.rollout import SamplingSettings, generate_batch, left_pad, sampling_settings
from fspo.utils.coalesce import Coalescer


def test_plugin_loads_and_verl_picks_the_cpu_platform():
    # A fresh process, as verl's Ray workers are: importing verl must load the plugin. The plugin leaves verl's
    # agent-loop module (~1.9 s of CPU) unimported, and its agent loop enters the registry when that module is.
    code = (
        "import sys, verl\n"
        "from fspo.cpu.plugin import STATE\n"
        "from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device\n"
        "assert STATE['active'] and STATE['error'] is None, STATE\n"
        "print(get_device_name(), get_nccl_backend(), get_torch_device().current_device())\n"
        "print('verl.experimental.agent_loop.agent_loop' in sys.modules)\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        "print(_agent_loop_registry['fspo_seeded_single_turn']['_target_'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "gloo", "cpu", "False", "fspo.cpu.agent_loop.SeededSingleTurnAgentLoop"]
    # The target is what verl's hydra instantiation imports in the agent-loop worker.
    module, _, name = out.split()[-1].rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), name), SingleTurnAgentLoop)


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


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


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


def test_generation_records_no_autograd_graph_though_the_weights_require_grad(tiny_lm):
    # The rollout server's weights require grad (from_pretrained's default). A graph recorded through the
    # cache grows every decoding step: SmolLM2's validation pass reached 14.8 GB and was killed.
    grad_modes = []
    hook = tiny_lm.register_forward_hook(lambda *_: grad_modes.append(torch.is_grad_enabled()))
    try:
        assert all(parameter.requires_grad for parameter in tiny_lm.parameters())
        settings = SamplingSettings(max_new_tokens=4, temperature=1.0, logprobs=True)
        generate_batch(tiny_lm, [[100, 200], [300]], settings, 0, set(), [1, 2])
    finally:
        hook.remove()
    assert grad_modes and not any(grad_modes)


PROMPTS = [[100, 200, 300, 5, 6], [400], [500, 600], [7, 8, 9, 10, 11, 12, 13, 14]]
SEEDS = [11, 22, 33, 44]


def test_a_seeded_request_samples_the_same_alone_in_a_batch_and_in_any_order(tiny_lm):
    # Each row draws from its own generator: batch-mates, their order and the left padding they
    # cause leave a row's tokens as they are.
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0, logprobs=True)
    batched = generate_batch(tiny_lm, PROMPTS, settings, 0, set(), SEEDS)
    reordered = generate_batch(tiny_lm, PROMPTS[::-1], settings, 0, set(), SEEDS[::-1])[::-1]
    for prompt, seed, (tokens, logprobs), (tokens_reordered, _) in zip(PROMPTS, SEEDS, batched, reordered):
        ((alone, alone_logprobs),) = generate_batch(tiny_lm, [prompt], settings, 0, set(), [seed])
        assert tokens == alone == tokens_reordered
        assert logprobs == alone_logprobs
    # Another seed, other tokens; the global generator is not what a seeded row samples from.
    torch.manual_seed(0)
    other = generate_batch(tiny_lm, PROMPTS, settings, 0, set(), [seed + 1 for seed in SEEDS])
    assert all(mine[0] != theirs[0] for mine, theirs in zip(batched, other))
    torch.manual_seed(1)
    assert generate_batch(tiny_lm, PROMPTS, settings, 0, set(), SEEDS) == batched


@hypothesis_settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_a_request_decodes_to_the_same_bits_whatever_shares_its_batch(tiny_lm, data):
    """The same requests, decoded in different batch compositions (which the rollout server's batches are, by
    timing: whatever arrived together), give the same tokens and the same log-probs to the last bit, greedy
    (validation) and sampled (rollouts). Batched left-padded decoding failed this: padding and a decoding
    step's row count change a row's rounding (log-probs differed in the last bits; greedy near-ties flip)."""
    prompts = data.draw(st.lists(st.lists(st.integers(5, 5000), min_size=1, max_size=24), min_size=2, max_size=6))
    seeds = list(range(7, 7 + len(prompts)))
    greedy = data.draw(st.booleans())
    settings = SamplingSettings(max_new_tokens=8, temperature=0.0 if greedy else 1.0, logprobs=True)
    together = generate_batch(tiny_lm, prompts, settings, 0, set(), seeds)
    cut = data.draw(st.integers(1, len(prompts) - 1))
    apart = generate_batch(tiny_lm, prompts[:cut], settings, 0, set(), seeds[:cut])
    apart += generate_batch(tiny_lm, prompts[cut:], settings, 0, set(), seeds[cut:])
    assert apart == together


def test_a_groups_rollouts_share_one_prefill_and_decode_as_each_alone(tiny_lm):
    # A GRPO group is n rollouts of one prompt: its prompt's forward runs once and every row starts from it.
    prompts = [PROMPTS[0]] * 4 + [PROMPTS[3]] * 3
    seeds = [5, 6, 7, 8, 9, 10, 11]
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, logprobs=True)
    prompt_forwards = []
    hook = tiny_lm.register_forward_pre_hook(
        lambda module, args, kwargs: prompt_forwards.append(kwargs["input_ids"].shape[1] > 1), with_kwargs=True
    )
    try:
        group = generate_batch(tiny_lm, prompts, settings, 0, set(), seeds, rows_per_step=4)
    finally:
        hook.remove()
    assert sum(prompt_forwards) == 2  # one per distinct prompt, though the group spans two decoding chunks
    for prompt, seed, row in zip(prompts, seeds, group):
        assert generate_batch(tiny_lm, [prompt], settings, 0, set(), [seed], rows_per_step=4) == [row]
    assert len({tuple(tokens) for tokens, _ in group[:4]}) > 1  # the rollouts differ: each row samples its own


def test_decoding_with_transposed_products_keeps_rows_independent_and_near_the_plain_form(tiny_lm, monkeypatch):
    # On AVX2 the decoding steps compute x @ Wᵀ as (W @ xᵀ)ᵀ (faster there): other last bits, same independence.
    settings = SamplingSettings(max_new_tokens=8, temperature=1.0, logprobs=True)
    plain = generate_batch(tiny_lm, PROMPTS, settings, 0, set(), SEEDS)
    monkeypatch.setattr(rollout, "transposed_decode_products", lambda: True)
    together = generate_batch(tiny_lm, PROMPTS, settings, 0, set(), SEEDS)
    apart = [generate_batch(tiny_lm, [p], settings, 0, set(), [s])[0] for p, s in zip(PROMPTS, SEEDS)]
    assert together == apart
    for (tokens, logprobs), (plain_tokens, plain_logprobs) in zip(together, plain):
        agree = next((i for i, (a, b) in enumerate(zip(tokens, plain_tokens)) if a != b), len(tokens))
        assert agree > 0 and np.allclose(logprobs[:agree], plain_logprobs[:agree], rtol=0, atol=1e-4)
    assert all(type(m).forward is m.forward.__func__ for m in tiny_lm.modules() if isinstance(m, torch.nn.Linear))


def test_a_response_ends_at_its_first_stop_token_and_rows_stop_on_their_own(tiny_lm):
    settings = SamplingSettings(max_new_tokens=10, temperature=1.0)
    free = generate_batch(tiny_lm, PROMPTS, settings, 0, set(), SEEDS)
    stop = free[0][0][2]  # row 0 samples it third
    stopped = generate_batch(tiny_lm, PROMPTS, settings, 0, {stop}, SEEDS)
    for (tokens, _), (full, _) in zip(stopped, free):
        expected = full[: full.index(stop) + 1] if stop in full else full
        assert tokens == expected and tokens.count(stop) <= 1
    assert stopped[0][0][-1] == stop


MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": st.text()}))


@given(
    run_seed=st.integers(0, 2**31),
    step=st.integers(0, 10**6),
    index=st.integers(0, 10**6),
    rollout=st.integers(0, 255),
    prompt=MESSAGES,
)
def test_sample_seed_is_a_fixed_63_bit_function_of_the_rollouts_identity(run_seed, step, index, rollout, prompt):
    seed = sample_seed(run_seed, step, index, rollout, prompt)
    assert 0 <= seed < 2**63
    # verl hands the messages over as a numpy array of dicts: the same prompt, the same seed.
    assert sample_seed(run_seed, step, index, rollout, np.array(prompt, dtype=object)) == seed
    others = {
        sample_seed(run_seed + 1, step, index, rollout, prompt),
        sample_seed(run_seed, step + 1, index, rollout, prompt),
        sample_seed(run_seed, step, index + 1, rollout, prompt),
        sample_seed(run_seed, step, index, rollout + 1, prompt),
        sample_seed(run_seed, step, index, rollout, [*prompt, {"role": "user", "content": "?"}]),
    }
    assert seed not in others and len(others) == 5


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
