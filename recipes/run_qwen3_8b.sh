#!/usr/bin/env bash
# FSPO on Qwen3-8B, a hybrid thinking model, on 8-GPU nodes. Extra args are Hydra overrides.
# Qwen3's own chat template is kept (custom_chat_template unset): with thinking on, its generation
# prompt is "<|im_start|>assistant\n" and the model opens <think> itself, so FSPO labels the model's
# own reasoning block and no prompt format adds a second <think> (prompt format `qwen3` in
# fspo.training.prompt_formats renders the same text). enable_thinking reaches the template through verl's
# data.apply_chat_template_kwargs (RLHFDataset's length filter and the agent loop's prompt ids).
# Qwen3-*-Thinking-2507 models work unchanged: their template ends the prompt with "<think>\n", the
# response holds only "</think>", and the reasoning is read from the response's start.
# Validation samples as Qwen3's model card asks for thinking mode (FSPO_QWEN3_THINKING_VALIDATION in
# common.sh: temperature 0.6, top-p 0.95, top-k 20), not greedily. Evaluate with
# `RECIPE=run_qwen3_8b.sh evaluate/run.sh MODEL` to generate the same 4096 tokens with the same sampling.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}
EXPERIMENT=${EXPERIMENT:-fspo_qwen3_8b}
QWEN3_THINKING_OVERRIDES=(
    +data.apply_chat_template_kwargs.enable_thinking=true
    data.max_response_length=4096                                   # GUESS: Qwen3 reasons at length; a response cut before </think> gets no step labels
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2          # GUESS: half the paper recipes' 4, for 1.5x the tokens per sequence
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4   # GUESS
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4       # GUESS
)
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" "${QWEN3_THINKING_OVERRIDES[@]}" "${FSPO_QWEN3_THINKING_VALIDATION[@]}" "$@"
