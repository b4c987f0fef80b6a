#!/usr/bin/env bash
# FSPO on Qwen3-4B with LoRA on one 80 GB GPU: actor, vLLM rollouts and the verifier share it.
# Extra args are Hydra overrides. Memory estimate per phase: `python benchmarks/recipe_memory.py`
# (docs/gpu-sizing.md, "Memory and disk").
#
# Why Qwen3-4B: a thinking model that writes its own <think> block (what FSPO labels) from the first
# step, where Qwen2.5-3B-Instruct would first have to learn the <think>/<answer> format; its bf16
# weights (8 GB) leave room for vLLM's KV cache of 8 rollouts x 6k tokens next to the actor.
# LoRA through verl's own support: only the adapters train (rank 64 on every linear layer, ~130 M
# parameters: their fp32 weights, gradients and Adam moments ~2 GB); the reference policy is the actor with its adapters
# off, so no second copy of the model. vLLM loads the base weights from MODEL_PATH itself
# (load_format=safetensors) and verl sends only the adapters after each update.
# Validation samples as Qwen3's model card asks for thinking mode (common.sh). scripts/merge_checkpoint.sh
# folds the adapter into the base weights, so its output is the trained policy.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
EXPERIMENT=${EXPERIMENT:-fspo_qwen3_4b_lora_1gpu}
NNODES=1
N_GPUS_PER_NODE=1
LORA_1GPU_OVERRIDES=(
    +data.apply_chat_template_kwargs.enable_thinking=true
    data.max_response_length=4096                                   # GUESS: as run_qwen3_8b.sh
    data.train_batch_size=32                                        # GUESS: 32 prompts x 8 rollouts = 256 responses per step on one GPU
    actor_rollout_ref.model.lora_rank=64                            # GUESS: a usual rank for RL with LoRA
    actor_rollout_ref.model.lora_alpha=32
    actor_rollout_ref.model.target_modules=all-linear
    actor_rollout_ref.actor.optim.lr=1e-5                           # GUESS: LoRA takes a ~10x higher lr than full fine-tuning
    actor_rollout_ref.actor.ppo_mini_batch_size=16                  # GUESS: 2 updates per step
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2          # GUESS: 12k tokens per micro-batch; its fp32 logits are the largest activation
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5            # GUESS: 40 GB for vLLM (8 GB weights + KV cache)
    actor_rollout_ref.rollout.load_format=safetensors               # vLLM reads the base weights from disk; verl syncs only the adapters
    actor_rollout_ref.rollout.layered_summon=true                   # gather the FSDP adapters layer by layer when syncing
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4   # GUESS
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4       # GUESS
)
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" "${LORA_1GPU_OVERRIDES[@]}" "${FSPO_QWEN3_THINKING_VALIDATION[@]}" "$@"
