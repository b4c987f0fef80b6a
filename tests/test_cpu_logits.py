"""The CPU platform's LM head at response positions only (fspo.cpu.patches.patch_response_logits, issue 68).

verl's padded forward reads each row's outputs at [prompt_len - 1, prompt_len + response_len - 1)
(verl/workers/utils/padding.py:138): the patched engine must give those positions the same log-probs and
entropies as verl's own forward, and keep the update's gradient.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM
from verl.utils import tensordict_utils as tu
from verl.workers.engine.fsdp import transformer_impl
from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

from fspo.cpu import patches, plugin

Engine = transformer_impl.FSDPEngineWithLMHead
PAD = 0


def _tiny_engine(seed: int = 0):
    """The engine's LM-head methods on a tiny random Llama, without FSDP or a process group (neither is read)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    engine = object.__new__(Engine)
    engine.module = LlamaForCausalLM(config).eval()
    engine.pad_to_length = None
    engine.engine_config = type("EngineConfig", (), {"entropy_checkpointing": False})()
    return engine


def _micro_batch(prompt_lens, response_lens, *, prompt_width=12, response_width=6, seed=1):
    """An RL micro-batch as verl's trainer hands it to the engine: left-padded prompts, right-padded responses,
    turned into verl's no-padding layout (verl/trainer/ppo/ray_trainer.py:1295)."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(prompt_lens)
    prompts = torch.full((rows, prompt_width), PAD)
    responses = torch.full((rows, response_width), PAD)
    attention = torch.zeros(rows, prompt_width + response_width, dtype=torch.long)
    for row, (prompt_len, response_len) in enumerate(zip(prompt_lens, response_lens, strict=True)):
        prompts[row, prompt_width - prompt_len :] = torch.randint(1, 300, (prompt_len,), generator=generator)
        responses[row, :response_len] = torch.randint(1, 300, (response_len,), generator=generator)
        attention[row, prompt_width - prompt_len : prompt_width + response_len] = 1
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)
    data = tu.get_tensordict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention,
            "response_mask": attention[:, prompt_width:],
            "position_ids": position_ids,
        }
    )
    data = left_right_2_no_padding(data)
    tu.assign_non_tensor(data, use_remove_padding=False, calculate_entropy=True, temperature=0.7, pad_token_id=PAD)
    return data


def _forward(engine, micro_batch, prepare_inputs, prepare_outputs):
    """One engine forward as FSDPEngineWithLMHead.forward_step runs it (transformer_impl.py:1549-1566)."""
    model_inputs, output_args = prepare_inputs(engine, micro_batch)
    output = engine.module(**model_inputs, use_cache=False)
    outputs = prepare_outputs(engine, output, output_args, micro_batch, None)
    return {name: no_padding_2_padding(value, micro_batch) for name, value in outputs.items()}, model_inputs


def _verls(engine, micro_batch):
    return _forward(
        engine, micro_batch, Engine.prepare_model_inputs.__wrapped__, Engine.prepare_model_outputs.__wrapped__
    )


def _trimmed(engine, micro_batch):
    return _forward(engine, micro_batch, Engine.prepare_model_inputs, Engine.prepare_model_outputs)


def test_the_engine_imported_in_a_cpu_process_is_the_trimmed_one():
    # This process is on the CPU platform (no accelerator), so importing the engine applied the patch.
    assert getattr(Engine.prepare_model_inputs, "_fspo_cpu_patched", False)


def test_the_cpu_presets_model_settings_take_the_trimmed_path():
    preset = yaml.safe_load((Path(patches.__file__).parents[1] / "config" / "platform" / "cpu.yaml").read_text())
    model = preset["actor_rollout_ref"]["model"]
    micro_batch = _micro_batch([5, 9], [3, 2])
    # verl's default for fused kernels is off (verl/trainer/config/model/hf_model.yaml:61).
    tu.assign_non_tensor(
        micro_batch,
        use_remove_padding=model["use_remove_padding"],
        use_fused_kernels=model.get("use_fused_kernels", False),
    )
    assert patches._trims_logits(_tiny_engine(), micro_batch)


@pytest.mark.parametrize(
    ("prompt_lens", "response_lens"),
    [
        ([5, 12, 8, 3], [6, 2, 4, 6]),  # prompts of different lengths, left-padded to 12, responses right-padded
        ([12, 12, 12], [6, 6, 1]),  # equal prompts: the trim starts at the last prompt token
        ([1, 7], [3, 6]),  # a one-token prompt reads from position 0: nothing trimmed
    ],
    ids=["prompts_of_different_lengths", "equal_prompts", "one_token_prompt"],
)
def test_trimmed_forward_gives_verls_log_probs_and_entropy_at_every_read_position(prompt_lens, response_lens):
    engine = _tiny_engine()
    micro_batch = _micro_batch(prompt_lens, response_lens)
    with torch.no_grad():
        expected, _ = _verls(engine, micro_batch)
        trimmed, model_inputs = _trimmed(engine, micro_batch)
    assert model_inputs["logits_to_keep"] == model_inputs["input_ids"].shape[1] - (min(prompt_lens) - 1)
    assert set(trimmed) == {"log_probs", "entropy"}
    for name in trimmed:
        # Bitwise: the layers see the same rows, and each kept logit is the same product of one hidden state with
        # the head (the kernel's reduction over the hidden size does not depend on how many rows it is given).
        torch.testing.assert_close(trimmed[name], expected[name], rtol=0, atol=0)


def test_trimmed_forward_keeps_the_updates_gradient():
    micro_batch = _micro_batch([4, 11, 9], [5, 3, 6])
    mask = micro_batch["response_mask"].bool()
    gradients = []
    for forward in (_verls, _trimmed):
        engine = _tiny_engine()
        outputs, _ = forward(engine, micro_batch)
        (outputs["log_probs"][mask].sum() + outputs["entropy"][mask].sum()).backward()
        gradients.append({name: p.grad for name, p in engine.module.named_parameters()})
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, rtol=1e-5, atol=1e-6, msg=name)


def test_remove_padding_and_non_rl_batches_run_verls_forward_unchanged():
    engine = _tiny_engine()
    micro_batch = _micro_batch([5, 9], [3, 2])
    tu.assign_non_tensor(micro_batch, use_remove_padding=True)
    assert not patches._trims_logits(engine, micro_batch)
    micro_batch = _micro_batch([5, 9], [3, 2])
    del micro_batch["prompts"]  # SFT data: its loss reads every position (verl/workers/utils/losses.py:33-52)
    assert not patches._trims_logits(engine, micro_batch)


def test_a_hook_runs_on_its_module_once_it_is_imported_and_not_before(tmp_path, monkeypatch):
    # How the plugin patches the engine only in the processes that import it (the FSDP workers).
    (tmp_path / "fspo_probe_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    plugin.after_import("fspo_probe_module", seen.append)
    plugin.after_import("fspo_probe_module", seen.append)  # asked twice: still one hook
    assert seen == []
    import fspo_probe_module

    assert seen == [fspo_probe_module]
    plugin.after_import("fspo_probe_module", seen.append)  # already imported: runs now
    assert seen == [fspo_probe_module, fspo_probe_module]
    del sys.modules["fspo_probe_module"]
