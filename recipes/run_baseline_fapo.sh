#!/usr/bin/env bash
# Baseline: FAPO's flawed-positive penalty (Ding et al., arXiv 2510.22543) on FSPO's verifier, data and trainer.
# Right 1, wrong 0 (exact match); a right answer with an unsupported reasoning step (the verifier plays FAPO's
# GenRM) scores 1 - FAPO_PENALTY; under GRPO the penalty pushes a flawed positive down only once a group's fully
# correct rollouts outnumber its failed ones (fspo/methods/fapo.py). FAPO_PENALTY default 0.5: FAPO's 1.0 on +-1 rewards.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
EXPERIMENT=${EXPERIMENT:-baseline_fapo}
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" \
    fspo.mode=fapo \
    fspo.fapo_penalty="${FAPO_PENALTY:-0.5}" \
    "$@"
