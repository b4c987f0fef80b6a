# Shared launcher for the FSPO recipes: source it, then call `fspo_launch <overrides...> "$@"`.
#
# Every path, size and cluster setting comes from an environment variable with a default, so one
# recipe serves a laptop dry run, one 8-GPU node and a multi-node Ray cluster. Anything passed to a
# recipe is appended after its own overrides: Hydra keeps the last value, so `key=value` on the
# command line wins over the recipe.
#
# Environment (defaults in brackets):
#   MODEL_PATH        HF model dir or hub id                     [set by each recipe]
#   TRAIN_FILES       a train parquet file, or a Hydra list of them [[data/hotpotqa/train.parquet,data/simplerl_math/train.parquet]]
#   VAL_FILES         a validation parquet file, or a Hydra list    [[data/hotpotqa/test.parquet]]
#                     (one file is taken as given, any character; in a [list] quote a name that holds , or spaces)
#   NNODES            nodes in the Ray cluster                   [1]
#   N_GPUS_PER_NODE   GPUs per node                              [8]
#   PROJECT           trainer.project_name (logger project)      [fspo]
#   EXPERIMENT        trainer.experiment_name                    [set by each recipe]
#   CKPT_DIR          root of the run's checkpoints              [checkpoints/$PROJECT/$EXPERIMENT]
#   LOGGER            trainer.logger list                        [[console]]  e.g. [console,wandb]
#   TOTAL_EPOCHS      trainer.total_epochs                       [3]
#   SAVE_FREQ / TEST_FREQ   trainer.save_freq / test_freq        [50 / 25]
#   CKPT_KEEP         checkpoints kept (actor, and critic with GAE) [2]: verl deletes older ones of this run;
#                     a save needs room for one more (docs/gpu-sizing.md, "Memory and disk")
#   PYTHON            interpreter running fspo.training.main              [.venv/bin/python if set up, else python]
#   RAY_ADDRESS       an existing Ray cluster to join (ray.init reads it); unset = start a local one
#   FSPO_DRY_RUN=1    resolve, validate and print the config, start nothing (read by fspo.training.main)
#   FSPO_PRINT_OVERRIDE=KEY   print the value the recipe (and its arguments) give KEY, the last one as Hydra
#                     keeps it, and start nothing; e.g. data.max_response_length (read by evaluate/run.sh)

set -euo pipefail

TRAIN_FILES=${TRAIN_FILES:-"[data/hotpotqa/train.parquet,data/simplerl_math/train.parquet]"}
VAL_FILES=${VAL_FILES:-"[data/hotpotqa/test.parquet]"}
NNODES=${NNODES:-1}
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}
PROJECT=${PROJECT:-fspo}
LOGGER=${LOGGER:-"[console]"}
SAVE_FREQ=${SAVE_FREQ:-50}    # GUESS (the paper does not give it)
TEST_FREQ=${TEST_FREQ:-25}    # GUESS (the paper does not give it)
CKPT_KEEP=${CKPT_KEEP:-2}

# Run from the repository root so that the relative data/ and checkpoints/ defaults resolve.
FSPO_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The environment scripts/setup.sh made, without activating it; PYTHON=... picks another.
if [[ -z "${PYTHON:-}" && -x "$FSPO_REPO_ROOT/.venv/bin/python" ]]; then
    PYTHON="$FSPO_REPO_ROOT/.venv/bin/python"
fi
PYTHON=${PYTHON:-python}

# Every number and folder above is checked once, here, by the environment door (fspo/config/environment.py: kind,
# range, a folder that is a file or empty), before bash or Hydra reads it: one line naming the variable, exit 2.
if [[ -z "${FSPO_PRINT_OVERRIDE:-}" ]]; then
    (cd "$FSPO_REPO_ROOT" && "$PYTHON" -m fspo.config.environment recipes) || exit 2
fi

# fspo_quoted VALUE: VALUE as one quoted value of Hydra's override grammar, read back exactly as given: spaces,
# parentheses, = , quotes and any letter are text. Hydra unescapes only backslashes before a quote or the closing
# one (hydra/grammar/OverrideLexer.g4, QUOTED_VALUE); OmegaConf, which reads the value next, only backslashes before
# ${ (an interpolation): each such run is doubled and the ${ or quote escaped.
fspo_quoted() {
    local value=$1 text="" run="" char i
    for ((i = 0; i < ${#value}; i++)); do  # OmegaConf's level: ${ is text
        char=${value:i:1}
        if [[ $char == '\' ]]; then run+=$char; continue; fi
        if [[ $char == '$' && ${value:i+1:1} == '{' ]]; then text+="$run$run\\"; else text+=$run; fi
        text+=$char
        run=""
    done
    text+=$run
    value=$text text="" run=""
    for ((i = 0; i < ${#value}; i++)); do  # Hydra's level: a quote is text
        char=${value:i:1}
        if [[ $char == '\' ]]; then run+=$char; continue; fi
        if [[ $char == "'" ]]; then text+="$run$run\\"; else text+=$run; fi
        text+=$char
        run=""
    done
    printf "'%s'" "$text$run$run"
}

# fspo_quoted_files VALUE: a Hydra list ([...]) as given, else one file, quoted (fspo_quoted).
fspo_quoted_files() {
    if [[ $1 == \[* ]]; then printf '%s' "$1"; else fspo_quoted "$1"; fi
}

# fspo_launch OVERRIDE... : run fspo.training.main with the shared overrides, then the given ones.
# Needs MODEL_PATH and EXPERIMENT set (each recipe sets a default).
fspo_launch() {
    : "${MODEL_PATH:?set MODEL_PATH to a Hugging Face model directory or hub id}"
    : "${EXPERIMENT:?set EXPERIMENT (the run name)}"
    local ckpt_dir=${CKPT_DIR:-checkpoints/${PROJECT}/${EXPERIMENT}}
    if [[ -n "${FSPO_PRINT_OVERRIDE:-}" ]]; then
        fspo_print_override "$FSPO_PRINT_OVERRIDE" "$@"
        return
    fi
    cd "$FSPO_REPO_ROOT"
    set -x
    exec "$PYTHON" -m fspo.training.main \
        actor_rollout_ref.model.path="$(fspo_quoted "$MODEL_PATH")" \
        data.train_files="$(fspo_quoted_files "$TRAIN_FILES")" \
        data.val_files="$(fspo_quoted_files "$VAL_FILES")" \
        trainer.nnodes="$NNODES" \
        trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
        trainer.project_name="$(fspo_quoted "$PROJECT")" \
        trainer.experiment_name="$(fspo_quoted "$EXPERIMENT")" \
        trainer.default_local_dir="$(fspo_quoted "$ckpt_dir")" \
        trainer.logger="$LOGGER" \
        trainer.save_freq="$SAVE_FREQ" \
        trainer.test_freq="$TEST_FREQ" \
        trainer.max_actor_ckpt_to_keep="$CKPT_KEEP" \
        trainer.max_critic_ckpt_to_keep="$CKPT_KEEP" \
        "$@"
}

# fspo_print_override KEY OVERRIDE... : print the last value given to KEY (Hydra keeps the last); fail if none.
fspo_print_override() {
    local key=$1 value="" found=0 arg
    shift
    for arg in "$@"; do
        if [[ "${arg#+}" == "$key="* ]]; then
            value=${arg#*=}
            found=1
        fi
    done
    if [[ $found == 0 ]]; then
        echo "$(basename "$0"): sets no $key (verl's default applies)" >&2
        return 1
    fi
    echo "$value"
}

# Validation's sampling, stated in every recipe so that `RECIPE=<recipe> evaluate/run.sh` samples as the run
# validates (it reads these keys through FSPO_PRINT_OVERRIDE): greedy, one response a prompt, which is verl's
# default (verl/trainer/config/rollout/rollout.yaml:151-169) and how the FSPO authors' verl validated (their
# ray_trainer.py:626). vLLM reads temperature, top_p and top_k (temperature 0 is greedy); do_sample is read by
# verl's transformers rollout.
FSPO_GREEDY_VALIDATION=(
    actor_rollout_ref.rollout.val_kwargs.temperature=0
    actor_rollout_ref.rollout.val_kwargs.top_p=1.0
    actor_rollout_ref.rollout.val_kwargs.top_k=-1
    actor_rollout_ref.rollout.val_kwargs.do_sample=false
    actor_rollout_ref.rollout.val_kwargs.n=1
)

# The paper's FSPO setting on 8-GPU nodes (Li & Ng 2025, sec. 4 / appendix): GRPO, 8 rollouts per
# prompt, low-variance KL loss 0.001, 2048/2048 tokens, temperature 1.0, vLLM rollouts, HHEM verifier.
# Values marked GUESS are not stated in the paper; they are sizes that fit a 7-8B model on 8x80 GB.
FSPO_GPU_OVERRIDES=(
    platform=gpu
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=false
    data.max_prompt_length=2048
    data.max_response_length=2048
    data.train_batch_size=128                                   # GUESS (paper: not stated)
    data.filter_overlong_prompts=true
    data.truncation=error
    actor_rollout_ref.model.use_remove_padding=true
    actor_rollout_ref.model.enable_gradient_checkpointing=true
    actor_rollout_ref.actor.optim.lr=1e-6                       # GUESS: a usual GRPO lr for 7-8B models; check against the paper
    actor_rollout_ref.actor.ppo_mini_batch_size=64              # GUESS
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4      # GUESS (fits 4096 tokens x 7B on 80 GB)
    actor_rollout_ref.actor.use_kl_loss=true
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.fsdp_config.param_offload=false
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=false
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=8
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size=2      # GUESS (7-8B in bf16 fits TP=1 too)
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6        # GUESS
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4   # 8 would be ~77 of 80 GB on the sdpa path (docs/gpu-sizing.md memory table)
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4       # as the rollout's
    actor_rollout_ref.ref.fsdp_config.param_offload=true
    fspo.enable=true
    fspo.flip=true
    fspo.verifier.name=hhem                                     # at threshold 0.5, Vectara's published operating point (fspo/config/calibrated_thresholds.py; not calibrated here: HHEM cannot load offline; calibrate with `fspo verify --labelled`)
    fspo.verifier.placement=colocated                           # one HHEM per GPU, in verl's GPU bundles (what `auto` picks on GPUs)
    trainer.total_epochs="${TOTAL_EPOCHS:-3}"                    # GUESS
    trainer.val_before_train=true
    # GUESS: 500 validation rows, not the whole test split (2,000 rows from `fspo data hotpotqa --size 2000`),
    # validated at every TEST_FREQ: a rate's standard error is at most 0.5/sqrt(500) = 2.2 points, for a quarter of
    # the generation (benchmarks/paper_scale.py prices it). verl draws the rows with data.seed
    # (verl/utils/dataset/rl_dataset.py:185-191); seeded, every run and every resume validates on the same rows,
    # and the training order is seeded too, as the CPU preset's (fspo/config/platform/cpu.yaml).
    data.val_max_samples=500
    'data.seed=${actor_rollout_ref.rollout.seed}'
    "${FSPO_GREEDY_VALIDATION[@]}"
)

# Validation sampling of Qwen3 models in thinking mode, as their model card recommends (Temperature=0.6,
# TopP=0.95, TopK=20: "DO NOT use greedy decoding, as it can lead to performance degradation and endless
# repetitions"). Put after FSPO_GPU_OVERRIDES, it replaces their greedy validation (Hydra keeps the last value),
# where a Qwen3 reasoning runs to the length limit without closing </think>.
FSPO_QWEN3_THINKING_VALIDATION=(
    actor_rollout_ref.rollout.val_kwargs.temperature=0.6
    actor_rollout_ref.rollout.val_kwargs.top_p=0.95
    actor_rollout_ref.rollout.val_kwargs.top_k=20
    actor_rollout_ref.rollout.val_kwargs.do_sample=true
)
