"""fspo/training/lora_fold.py: a LoRA adapter folded into its base keeps the update at a LoRA recipe's learning rate, and a
checkpoint whose adapter cannot be folded as trained is refused with one line.

LoRA's reference implementation is peft's (github.com/huggingface/peft, ``src/peft/tuners/lora/layer.py``,
``Linear.forward``: ``result = base_layer(x) + lora_B(lora_A(dropout(x))) * scaling`` with
``scaling = lora_alpha / r``, set in ``LoraLayer.update_layer``); the folded layer is compared with peft's
unmerged layer, which is what vLLM's LoRA path computes during training.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.training.lora_fold import (
    ADAPTER_PREFIX,
    LORA_A,
    LORA_B,
    LoraAdapter,
    LoraCheckpointError,
    check_lora_checkpoint,
    folded_weights,
)


def peft_layer(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float):
    """peft's LoRA layer (unmerged) on a linear layer of ``weight``."""
    from peft import LoraConfig, inject_adapter_in_model

    out_features, in_features = weight.shape
    model = torch.nn.Sequential()
    model.add_module("proj", torch.nn.Linear(in_features, out_features, bias=False))
    model.proj.weight.data.copy_(weight)
    config = LoraConfig(r=lora_a.shape[0], lora_alpha=alpha, target_modules=["proj"], lora_dropout=0.0)
    model = inject_adapter_in_model(config, model)
    model.proj.lora_A["default"].weight.data.copy_(lora_a)
    model.proj.lora_B["default"].weight.data.copy_(lora_b)
    return model.eval()


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    b_size=st.sampled_from([1e-5, 3e-5, 1e-4, 3e-4]),  # |B| after ~1-30 Adam updates at lr 1e-5
    rank=st.sampled_from([4, 8, 16]),
    alpha=st.sampled_from([8, 16, 32]),
)
def test_fold_keeps_an_update_below_bf16_resolution(seed, b_size, rank, alpha):
    """The folded layer computes what peft's unmerged layer does, to float32 precision, at lr-sized B: the case
    where storing the fold in bf16 (the base's dtype) rounds most weights back to the base."""
    generator = torch.Generator().manual_seed(seed)
    out_features, in_features = 48, 32
    # The base as verl's merger writes it: on the bf16 grid (Qwen3 ships in bf16).
    weight = (0.02 * torch.randn(out_features, in_features, generator=generator)).bfloat16()
    lora_a = (torch.rand(rank, in_features, generator=generator) * 2 - 1) / in_features**0.5  # peft's kaiming init
    lora_b = b_size * torch.randn(out_features, rank, generator=generator)
    module = "proj"
    base = {f"{module}.weight": weight}
    adapter = {f"{ADAPTER_PREFIX}{module}{LORA_A}": lora_a, f"{ADAPTER_PREFIX}{module}{LORA_B}": lora_b}
    lora = LoraAdapter(rank=rank, alpha=alpha, modules=(module,))

    [folded] = folded_weights(base, adapter, lora).values()
    x = torch.randn(16, in_features, generator=generator)
    with torch.no_grad():
        expected = peft_layer(weight.float(), lora_a, lora_b, alpha)(x)
        update = expected - x @ weight.float().T
        stored_error = (x @ folded.float().T - expected).abs().max()
    # float32's own rounding of the product: a few ulps of the largest partial sum.
    rounding = 4 * torch.finfo(torch.float32).eps * (x.abs() @ weight.float().abs().T).max()
    assert stored_error <= 1e-3 * update.abs().max() + rounding
    # Why the dtype matters here: a bf16 store of the same fold loses a large part of the update.
    bf16_error = (x @ folded.bfloat16().float().T - expected).abs().max()
    assert bf16_error > 10 * stored_error


# ---------------------------------------------------------------------------------------------------------
# The checkpoint check: consistent checkpoints pass, each kind of damage is one line naming what to fix.
# ---------------------------------------------------------------------------------------------------------

MODULE_NAMES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@st.composite
def checkpoints(draw):
    """(train_meta, adapter_config, adapter_shapes, base_shapes) of a consistent LoRA checkpoint."""
    rank = draw(st.integers(1, 128))
    alpha = draw(st.one_of(st.integers(1, 256), st.floats(0.125, 256)))
    targets = draw(st.lists(st.sampled_from(MODULE_NAMES), min_size=1, max_size=4, unique=True))
    layers = draw(st.integers(1, 3))
    adapter_shapes, base_shapes = {}, {"model.embed_tokens.weight": (100, 8)}
    for layer in range(layers):
        for name in targets:
            module = f"model.layers.{layer}.mlp.{name}"
            out_features, in_features = draw(st.integers(1, 4096)), draw(st.integers(1, 4096))
            base_shapes[f"{module}.weight"] = (out_features, in_features)
            adapter_shapes[f"{ADAPTER_PREFIX}{module}{LORA_A}"] = (rank, in_features)
            adapter_shapes[f"{ADAPTER_PREFIX}{module}{LORA_B}"] = (out_features, rank)
    meta = {"r": rank, "lora_alpha": alpha, "task_type": "CAUSAL_LM"}
    config = {"r": rank, "lora_alpha": alpha, "target_modules": targets, "use_dora": False, "rank_pattern": {}}
    return meta, config, adapter_shapes, base_shapes


@settings(max_examples=60, deadline=None)
@given(checkpoints())
def test_a_consistent_checkpoint_folds_at_its_trained_scale(checkpoint):
    meta, config, adapter_shapes, base_shapes = checkpoint
    lora = check_lora_checkpoint(meta, config, adapter_shapes, base_shapes)
    assert lora.scale == meta["lora_alpha"] / meta["r"]
    assert len(lora.modules) == len(adapter_shapes) // 2


def damaged(checkpoint, damage: str, draw):
    meta, config, adapter_shapes, base_shapes = (
        (dict(part) if part is not None else None) for part in checkpoint
    )  # fmt: skip
    name = draw(st.sampled_from(sorted(adapter_shapes)))
    if damage == "no metadata":
        meta = None
    elif damage == "alpha 0 in metadata":
        meta["lora_alpha"] = draw(st.sampled_from([0, -1, float("nan"), float("inf"), None, "32", True]))
    elif damage == "rank not an integer":
        meta["r"] = meta["r"] + 0.5
    elif damage == "alpha differs":
        config["lora_alpha"] = 0  # what verl's merger writes without the metadata
    elif damage == "rank differs":
        config["r"] = meta["r"] + 1
    elif damage == "no target modules":
        config["target_modules"] = draw(st.sampled_from([[], None, "all-linear", [1]]))
    elif damage == "module not a target":
        config["target_modules"] = [t for t in config["target_modules"] if t != name.split(".")[-3]] or ["other"]
    elif damage == "unpaired tensor":
        del adapter_shapes[name]
    elif damage == "wrong rank shape":
        shape = adapter_shapes[name]
        adapter_shapes[name] = (shape[0] + 1, shape[1]) if LORA_A in name else (shape[0], shape[1] + 1)
    elif damage == "no base weight":
        del base_shapes[name.removeprefix(ADAPTER_PREFIX).rsplit(".lora_", 1)[0] + ".weight"]
    elif damage == "no adapter tensors":
        adapter_shapes = {}
    elif damage == "dora":
        config["use_dora"] = True
    return meta, config, adapter_shapes, base_shapes


DAMAGES = [
    "no metadata",
    "alpha 0 in metadata",
    "rank not an integer",
    "alpha differs",
    "rank differs",
    "no target modules",
    "module not a target",
    "unpaired tensor",
    "wrong rank shape",
    "no base weight",
    "no adapter tensors",
    "dora",
]


@settings(max_examples=150, deadline=None)
@given(checkpoints(), st.sampled_from(DAMAGES), st.data())
def test_a_damaged_checkpoint_is_refused_with_one_line(checkpoint, damage, data):
    with pytest.raises(LoraCheckpointError) as refused:
        check_lora_checkpoint(*damaged(checkpoint, damage, data.draw), actor_dir="run/global_step_2/actor")
    message = str(refused.value)
    assert "\n" not in message and message
    if damage == "no metadata":
        assert "run/global_step_2/actor/lora_train_meta.json is missing" in message


# ---------------------------------------------------------------------------------------------------------
# The command: python -m fspo.training.lora_fold on a merged folder as verl's merger writes it.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def merged_lora(tmp_path):
    """A folder as verl's merger writes a LoRA checkpoint (the bf16 base, lora_adapter/), and its actor folder."""
    from peft import LoraConfig
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    merged = tmp_path / "merged"
    model.save_pretrained(merged)
    rank, alpha, targets = 8, 16, ["q_proj", "v_proj"]
    adapter = {}
    for name, weight in model.state_dict().items():
        module = name.removesuffix(".weight")
        if module.rsplit(".", 1)[-1] in targets:
            out_features, in_features = weight.shape
            adapter[f"{ADAPTER_PREFIX}{module}{LORA_A}"] = torch.randn(rank, in_features).bfloat16() / 6
            adapter[f"{ADAPTER_PREFIX}{module}{LORA_B}"] = (1e-4 * torch.randn(out_features, rank)).bfloat16()
    (merged / "lora_adapter").mkdir()
    save_file(adapter, merged / "lora_adapter" / "adapter_model.safetensors")
    adapter_config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets).to_dict()
    adapter_config = {key: value for key, value in adapter_config.items() if key in ("r", "lora_alpha")}
    adapter_config["target_modules"] = targets
    (merged / "lora_adapter" / "adapter_config.json").write_text(json.dumps(adapter_config))
    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha}))
    return {"merged": merged, "actor": actor, "adapter": adapter, "scale": alpha / rank}


def test_fold_command_stores_float32_and_evaluation_loads_it_so(merged_lora):
    from safetensors.torch import load_file

    from fspo.evaluation.generation import keeps_float32
    from fspo.training.lora_fold import main

    base = load_file(merged_lora["merged"] / "model.safetensors")
    assert main([str(merged_lora["merged"]), str(merged_lora["actor"])]) == 0
    folded = load_file(merged_lora["merged"] / "model.safetensors")
    assert keeps_float32(merged_lora["merged"])
    name = "model.layers.0.self_attn.q_proj.weight"
    module = name.removesuffix(".weight")
    a = merged_lora["adapter"][f"{ADAPTER_PREFIX}{module}{LORA_A}"].float()
    b = merged_lora["adapter"][f"{ADAPTER_PREFIX}{module}{LORA_B}"].float()
    assert folded[name].dtype == torch.float32
    torch.testing.assert_close(folded[name], base[name].float() + merged_lora["scale"] * b @ a, rtol=0, atol=1e-7)
    untouched = "model.layers.0.self_attn.k_proj.weight"
    assert torch.equal(folded[untouched], base[untouched].float())


def test_fold_command_refuses_a_checkpoint_without_its_metadata(merged_lora, capsys):
    from fspo.training.lora_fold import main

    (merged_lora["actor"] / "lora_train_meta.json").unlink()
    before = {path: path.read_bytes() for path in merged_lora["merged"].rglob("*") if path.is_file()}
    assert main([str(merged_lora["merged"]), str(merged_lora["actor"])]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "lora_train_meta.json is missing" in line and "lora_alpha=0" in line
    assert {path: path.read_bytes() for path in merged_lora["merged"].rglob("*") if path.is_file()} == before


def test_fold_command_refuses_metadata_without_an_adapter(merged_lora, capsys):
    import shutil

    from fspo.training.lora_fold import main

    shutil.rmtree(merged_lora["merged"] / "lora_adapter")
    assert main([str(merged_lora["merged"]), str(merged_lora["actor"])]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "has lora_train_meta.json but its weights hold no LoRA adapter" in line


@pytest.mark.parametrize(
    ("alpha", "adapter_factor", "refusal"),
    [
        # issue 71: it folded, exit 0, into inf weights
        (1e300, 1, "lora_alpha=1e+300 / r=8 is 1.25e+299, outside float32"),
        (1e-300, 1, "lora_alpha=1e-300 / r=8 is 1.25e-301, outside float32"),
        (3e38, 1e6, "gives non-finite weights"),  # a finite scale whose product B A overflows float32
    ],
    ids=["scale past float32", "scale below float32", "fold overflows"],
)
def test_fold_command_refuses_a_scale_float32_cannot_hold(merged_lora, capsys, alpha, adapter_factor, refusal):
    from safetensors.torch import save_file

    from fspo.training.lora_fold import main

    adapter_dir = merged_lora["merged"] / "lora_adapter"
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    (adapter_dir / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": alpha}))
    (merged_lora["actor"] / "lora_train_meta.json").write_text(json.dumps({"r": config["r"], "lora_alpha": alpha}))
    adapter = {name: (tensor.float() * adapter_factor) for name, tensor in merged_lora["adapter"].items()}
    save_file(adapter, adapter_dir / "adapter_model.safetensors")
    before = {path: path.read_bytes() for path in merged_lora["merged"].rglob("*") if path.is_file()}
    assert main([str(merged_lora["merged"]), str(merged_lora["actor"])]) == 1
    err = capsys.readouterr().err
    assert refusal in err.strip().splitlines()[-1] and "Traceback" not in err, err  # after transformers' progress bar
    assert {path: path.read_bytes() for path in merged_lora["merged"].rglob("*") if path.is_file()} == before
