#!/usr/bin/env bash
# A tiny FSPO run on a machine without an accelerator (platform=cpu: FSDP2 on gloo, transformers
# sampling, lexical verifier). Give it a small model and small parquet files, e.g. the tiny model
# and synthetic data of `fspo quickstart`, or `fspo data synthetic --size 64`:
#   MODEL_PATH=/path/to/tiny TRAIN_FILES=data/synthetic/train.parquet VAL_FILES=data/synthetic/test.parquet \
#     recipes/run_cpu.sh trainer.total_training_steps=2
# MODEL_PATH defaults to the SmolLM2-135M-Instruct that `fspo quickstart` converted, when it is there.
# The lexical verifier checks each clause of a step against its own best evidence sentence
# (evidence_unit=sentence), as the quickstart does. It trains at its calibrated threshold (lexical: 1.0, the
# best balanced accuracy on held-out synthetic facts, `fspo verify --labelled synthetic --verifier lexical
# --evidence-unit sentence`, and on judge-labelled quickstart steps, benchmarks/judged_steps.py).
# In float32 the old-policy log-probs are the rollout's (on-policy, the same numbers: fspo.cpu.compute), not a forward.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
quickstart_model="${FSPO_CACHE:-$HOME/.cache/fspo}/SmolLM2-135M-Instruct"
if [[ -z "${MODEL_PATH:-}" && -f "$quickstart_model/config.json" ]]; then
    MODEL_PATH="$quickstart_model"
fi
: "${MODEL_PATH:?set MODEL_PATH to a small local Hugging Face model directory (or run fspo quickstart once: its SmolLM2 becomes the default)}"
# FSDP workers (gloo); the GPU default of 8 does not apply, so read CPU_WORKERS instead
N_GPUS_PER_NODE=${CPU_WORKERS:-1}
NNODES=1
EXPERIMENT=${EXPERIMENT:-fspo_cpu}
SAVE_FREQ=${STEPS:-2}
TEST_FREQ=${STEPS:-2}
fspo_launch \
    platform=cpu \
    algorithm.adv_estimator=grpo \
    data.train_batch_size=2 \
    data.max_prompt_length=256 \
    data.max_response_length=64 \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.calculate_log_probs='${fspo_exact_rollout_logprobs:actor_rollout_ref.rollout.dtype}' \
    algorithm.rollout_correction.bypass_mode='${fspo_exact_rollout_logprobs:actor_rollout_ref.rollout.dtype}' \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.optim.lr=1e-5 \
    fspo.verifier.name=lexical \
    fspo.verifier.evidence_unit=sentence \
    trainer.total_training_steps="${STEPS:-2}" \
    trainer.val_before_train=false \
    "${FSPO_GREEDY_VALIDATION[@]}" \
    "$@"
