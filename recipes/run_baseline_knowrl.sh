#!/usr/bin/env bash
# Baseline: KnowRL's factuality reward (Ren et al., arXiv 2506.19807) on FSPO's verifier, data and trainer.
# As KnowRL's released code: right 1, refusal 2/3, wrong 0 (exact match), and a wrong, non-refusing answer
# gains KNOWRL_FACT_WEIGHT x (share of supported reasoning steps x FActScore's length penalty, gamma 10; a
# repeated step counts once, as FActScore counts a fact);
# sequence level, GRPO, no advantage flip (fspo/methods/knowrl.py).
# KNOWRL_FACT_WEIGHT default 1/3: KnowRL's weight 1 over its correctness gap of 3 (+2 right, -1 wrong).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}
EXPERIMENT=${EXPERIMENT:-baseline_knowrl}
fspo_launch "${FSPO_GPU_OVERRIDES[@]}" \
    fspo.mode=knowrl \
    fspo.knowrl_fact_weight="${KNOWRL_FACT_WEIGHT:-0.3333333333333333}" \
    "$@"
