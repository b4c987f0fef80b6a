#!/usr/bin/env bash
# FSPO on Qwen2.5-7B (base). Base models have no chat template: the prompt is the paper's plain
# transcript "<instruction>\nUser: <question>\nAssistant: <think>" (fspo.training.prompt_formats, qwen-base),
# put on the tokenizer by verl from custom_chat_template. The single quotes keep `${...}` for
# OmegaConf, whose resolver (registered by fspo.training.main) returns the Jinja template.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B}
EXPERIMENT=${EXPERIMENT:-fspo_qwen2.5_7b_base}
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" \
    'actor_rollout_ref.model.custom_chat_template=${fspo_chat_template:qwen-base}' \
    "$@"
