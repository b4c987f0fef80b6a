"""The places where verl 0.9.1 assumes an accelerator, bridged for the CPU platform.

Each patch is idempotent and applied only in CPU mode (see :mod:`fspo.cpu.plugin`).
"""

from __future__ import annotations

import functools
import os

import torch.distributed

from fspo.cpu.compute import use_all_threads


def normalise_backend(backend: str | None) -> str | None:
    """Collapse verl's ``"cpu:gloo,<device>:<backend>"`` when the device is the CPU too.

    verl builds ``f"cpu:gloo,{device}:{backend}"``; with ``device == "cpu"`` that names the CPU
    twice and torch rejects it ("Duplicate device type cpu"). Every entry then is gloo on the CPU.

    >>> normalise_backend("cpu:gloo,cpu:gloo")
    'gloo'
    >>> normalise_backend("cpu:gloo,cuda:nccl")
    'cpu:gloo,cuda:nccl'
    """
    if not backend or "," not in backend:
        return backend
    entries = {entry.strip() for entry in backend.split(",")}
    if entries == {"cpu:gloo"}:
        return "gloo"
    return backend


def _patch_init_process_group() -> None:
    original = torch.distributed.init_process_group
    if getattr(original, "_fspo_cpu_patched", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if args:
            args = (normalise_backend(args[0]), *args[1:])
        elif "backend" in kwargs:
            kwargs["backend"] = normalise_backend(kwargs["backend"])
        return original(*args, **kwargs)

    init_process_group._fspo_cpu_patched = True
    torch.distributed.init_process_group = init_process_group


def _patch_cpu_offload_policy() -> None:
    """Make FSDP2's ``CPUOffloadPolicy`` never pin memory.

    verl wraps every forward-only model (the reference policy of a KL loss) in
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator, so with a CPU-only torch
    the reference model fails to build ("Cannot access accelerator device when none is
    available"). On the CPU there is nothing to pin for: parameters already live where they are
    computed on. The policy is replaced where verl looks it up (torch's FSDP package, which
    ``verl.utils.fsdp_utils`` imports it from, and the modules that re-export it once loaded).
    """
    import sys

    import torch.distributed.fsdp as fsdp

    original = fsdp.CPUOffloadPolicy
    if getattr(original, "_fspo_cpu_patched", False):
        return

    class UnpinnedCPUOffloadPolicy(original):
        _fspo_cpu_patched = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "CPUOffloadPolicy", None) is original:
            module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def apply() -> None:
    """Apply every CPU patch in this process."""
    _patch_init_process_group()
    _patch_cpu_offload_policy()
    # Ray runs verl's workers with OMP_NUM_THREADS=1 (they ask it for no CPUs); the trainer's
    # phases take turns on the machine, so each may compute on every core.
    use_all_threads()
    # verl registers its FSDP engine for cuda/npu only, but the engine itself is
    # device-agnostic (it asks the platform for its device): look it up under "cuda".
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    # The platform is decided once here; children (Ray workers) inherit the decision.
    os.environ.setdefault("VERL_PLATFORM", "cpu")


# verl 0.9.1's FSDP engine, whose LM-head forward the CPU platform trims (patch_response_logits).
ENGINE_MODULE = "verl.workers.engine.fsdp.transformer_impl"
# Key in the engine's per-micro-batch output_args: the first position whose logits the model computed.
_LOGITS_FROM = "fspo_logits_from"


def first_read_position(micro_batch) -> int:
    """The earliest position whose log-prob any row's loss or metric reads: the token before its first response token.

    verl reads row outputs at ``[prompt_len - 1, prompt_len + response_len - 1)`` (``no_padding_2_padding``,
    verl/workers/utils/padding.py:138); prompt lengths by its rule there (padding.py:116, 123).
    """
    prompts = micro_batch["prompts"]
    if prompts.is_nested:
        prompt_lens = prompts.offsets().diff()
    else:
        prompt_lens = micro_batch["attention_mask"][:, : prompts.shape[1]].sum(dim=1)
    return max(int(prompt_lens.min().item()) - 1, 0)


def _trims_logits(engine, micro_batch) -> bool:
    """Whether this forward takes the path the trim supports: padded (no remove-padding), unfused, RL data, a model
    that accepts ``logits_to_keep``. Anything else runs verl's own forward unchanged."""
    import inspect

    from verl.utils import tensordict_utils as tu

    def flag(key: str) -> bool:
        return bool(tu.get_non_tensor_data(data=micro_batch, key=key, default=False))

    if flag("use_fused_kernels") or flag("distillation_use_topk") or flag("distillation_only"):
        return False
    if tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True):
        return False
    if "prompts" not in micro_batch.keys() or "attention_mask" not in micro_batch.keys():
        return False
    return "logits_to_keep" in inspect.signature(engine.module.forward).parameters


def _rows_from(nested: torch.Tensor, start: int) -> torch.Tensor:
    """Each row of a jagged tensor from position ``start`` on."""
    return torch.nested.as_nested_tensor([row[start:] for row in nested.unbind()], layout=torch.jagged)


def _rows_padded_before(tail: torch.Tensor, full_offsets: torch.Tensor, start: int) -> torch.Tensor:
    """The inverse of :func:`_rows_from` for outputs: rows of ``tail`` behind ``start`` zeros (positions no one reads)."""
    lengths = full_offsets.diff()
    position_in_row = torch.arange(int(full_offsets[-1]), device=full_offsets.device) - torch.repeat_interleave(
        full_offsets[:-1], lengths
    )
    values = tail.values()
    full = values.new_zeros((position_in_row.numel(), *values.shape[1:]))
    # masked_scatter keeps the autograd path to the kept log-probs (the update's loss).
    full = full.masked_scatter((position_in_row >= start).view(-1, *[1] * (values.dim() - 1)), values)
    return torch.nested.nested_tensor_from_jagged(full, full_offsets)


def patch_response_logits(engine_module) -> None:
    """Compute the LM head only from the first position a loss or metric reads, in the actor's and reference's passes.

    verl's padded (no remove-padding) forward computes logits at every position of every row
    (verl/workers/engine/fsdp/transformer_impl.py:1275-1311, 1477-1540), though only response positions are read:
    with 213-token prompts and ~38-token responses, ~85% of a 49,152-word output layer's work and of its
    log-softmax. Rows are right-padded (transformer_impl.py:1288), so a response's positions are the trailing ones
    from the batch's shortest prompt on: the model gets ``logits_to_keep`` (transformers' causal-LM argument), and
    verl's own output code runs on each row's tail; outputs before it are zeros no one reads.
    """
    engine_class = engine_module.FSDPEngineWithLMHead
    original_inputs = engine_class.prepare_model_inputs
    if getattr(original_inputs, "_fspo_cpu_patched", False):
        return
    original_outputs = engine_class.prepare_model_outputs

    @functools.wraps(original_inputs)
    def prepare_model_inputs(self, micro_batch):
        model_inputs, output_args = original_inputs(self, micro_batch)
        if _trims_logits(self, micro_batch):
            start = first_read_position(micro_batch)
            model_inputs["logits_to_keep"] = model_inputs["input_ids"].shape[1] - start
            output_args[_LOGITS_FROM] = start
        return model_inputs, output_args

    @functools.wraps(original_outputs)
    def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
        if _LOGITS_FROM not in output_args:
            return original_outputs(self, output, output_args, micro_batch, logits_processor_func)
        start = output_args[_LOGITS_FROM]
        input_ids = micro_batch["input_ids"]
        tail_ids = _rows_from(input_ids, start)
        tail_batch = micro_batch.copy()
        tail_batch["input_ids"] = tail_ids
        # The label of each kept position, as verl rolls them (transformer_impl.py:1283); a row's last is not read.
        tail_args = {**output_args, "input_ids_rmpad_rolled": torch.roll(tail_ids.values(), shifts=-1, dims=0)}
        tail_outputs = original_outputs(self, output, tail_args, tail_batch, logits_processor_func)
        return {name: _rows_padded_before(value, input_ids.offsets(), start) for name, value in tail_outputs.items()}

    prepare_model_inputs._fspo_cpu_patched = True
    engine_class.prepare_model_inputs = prepare_model_inputs
    engine_class.prepare_model_outputs = prepare_model_outputs


# The flag FSPO's trainer puts in an update's extra_info when every advantage is 0 (fspo.skip_dead_steps).
ZERO_GRADIENT_UPDATE = "fspo_zero_gradient_update"


# Model config keys that mark parameters a forward may leave untouched (experts no token reached, a vision or audio
# tower on text): verl's pass leaves their gradient None, and AdamW skips them, where zeros would decay them.
_SPARSE_KEYS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_num_experts",
    "vision_config",
    "audio_config",
)


def zero_gradient_is_exact(module) -> bool:
    """Whether zeros are exactly the gradient verl's pass would give ``module`` at zero advantages: every parameter
    on the loss's path (no experts, no vision or audio tower) and no dropout (whose draws the pass would take)."""
    config = getattr(module, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return False
    values = config.to_dict()
    if any(values.get(key) for key in _SPARSE_KEYS):
        return False
    return not any(
        "dropout" in key and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        for key, value in values.items()
    )


def patch_zero_gradient_updates(engine_module) -> None:
    """An update flagged :data:`ZERO_GRADIENT_UPDATE` gets zero gradients without the forward and the backward.

    Its advantages are all 0 and its loss is -advantage x a function of the policy with no other term
    (:func:`fspo.training.trainer.dead_step_blocker`), so verl's full computation gives every parameter a gradient of
    exactly 0. The optimizer step then runs as ever (clipping a norm of 0, AdamW's momentum and weight decay, the LR
    schedule): the weights are the full computation's, bit for bit. Only the per-micro-batch metrics (pg_loss,
    clip fractions, KL) are not computed; the loss logged is that 0.

    Only for a dense text model without dropout (:func:`zero_gradient_is_exact`); any other runs the full pass. A
    forward whose activations overflow (NaN logits) would have made verl skip the optimizer step; the shortcut
    cannot see that.
    """
    engine_class = engine_module.FSDPEngine
    original = engine_class.forward_backward_batch
    if getattr(original, "_fspo_cpu_patched", False):
        return

    @functools.wraps(original)
    def forward_backward_batch(self, data, loss_function, forward_only=False):
        from verl.utils import tensordict_utils as tu

        flagged = tu.get_non_tensor_data(data=data, key=ZERO_GRADIENT_UPDATE, default=False)
        if forward_only or not flagged or not zero_gradient_is_exact(self.module):
            return original(self, data, loss_function, forward_only)
        for parameter in self.module.parameters():
            if parameter.requires_grad:
                parameter.grad = torch.zeros_like(parameter)
        return {"model_output": {}, "loss": [0.0], "metrics": {}}

    forward_backward_batch._fspo_cpu_patched = True
    engine_class.forward_backward_batch = forward_backward_batch


def patch_engine(engine_module) -> None:
    """The CPU platform's changes to verl's FSDP engine."""
    patch_response_logits(engine_module)
    patch_zero_gradient_updates(engine_module)
