#!/usr/bin/env bash
# Baseline: FAPO's flawed-positive penalty (Ding et al., arXiv 2510.22543) on FSPO's verifier, data and trainer.
# Right 1, wrong 0 (exact match); a right answer with an unsupported reasoning step (the verifier plays FAPO's
# GenRM) scores 1 - FAPO_PENALTY; under GRPO the penalty pushes a flawed positive down only once a group's fully
# correct rollouts outnumber its failed ones (fspo/methods/fapo.py). FAPO_PENALTY default 0.5: FAPO's 1.0 on +-1 rewards.
# Held-out rows (split test: validation) score by correctness alone, as FAPO's reward function does.
#
# FAPO's recipe (verl-recipe fapo/run_fapo_7b.sh, and its GRPO baseline run_baseline_7b.sh) also trains with
# DAPO's clip-higher and overlong penalty, set here through the same verl keys:
# - clip_ratio_high 0.28 (line 15);
# - the overlong penalty (lines 18-21, 128-133): FAPO's last 4096 of 8192 response tokens at factor 1.0 on +-1
#   rewards become the last 1024 of this recipe's 2048 (data.max_response_length in common.sh) at 0.5 on 0-1
#   rewards. It shapes training rows only (fspo/training/reward.py). Set max_resp_len and the buffer with
#   data.max_response_length (verl's dapo manager reads them apart, as here): a run refuses a max_resp_len below it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
EXPERIMENT=${EXPERIMENT:-baseline_fapo}
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" \
    fspo.mode=fapo \
    fspo.fapo_penalty="${FAPO_PENALTY:-0.5}" \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    +reward.reward_kwargs.max_resp_len=2048 \
    +reward.reward_kwargs.overlong_buffer_cfg.enable=true \
    +reward.reward_kwargs.overlong_buffer_cfg.len=1024 \
    +reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5 \
    +reward.reward_kwargs.overlong_buffer_cfg.log=true \
    "$@"
