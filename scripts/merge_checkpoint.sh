#!/usr/bin/env bash
# Merge a verl FSDP actor checkpoint into a Hugging Face model directory and check that it loads.
#
#   scripts/merge_checkpoint.sh [--target-dir DIR] [--trust-remote-code] RUN_DIR [STEP]
#
# RUN_DIR is the run's trainer.default_local_dir (it holds global_step_N/ and
# latest_checkpointed_iteration.txt). STEP defaults to the latest checkpointed step. The merged model
# goes to RUN_DIR/global_step_N/merged unless --target-dir is given. The last line printed is the
# merged directory, so `model=$(scripts/merge_checkpoint.sh RUN_DIR | tail -1)` works.
# The target follows fspo's output-folder rule (fspo/utils/output_dir.py): the merge replaces only files fspo
# wrote there (listed in .fspo-outputs.json), leaves your other files (notes, an adapter) alone, and refuses,
# naming the file, a file of the same name it did not write (a base model's config.json) or a link; a
# linked target folder is followed. The merge goes to a staging folder inside the target and its files
# move in only once the result loads; a failure leaves nothing behind.
# A LoRA run's adapter is checked against the run's metadata and folded into the base weights
# (W + lora_alpha/r * B A), stored in float32 (bf16 would round a LoRA update away), so the merged model is
# the trained policy; `fspo evaluate` loads it as float32. The adapter alone is kept in lora_adapter/.
# Environment: PYTHON (interpreter with verl and transformers) [.venv/bin/python if set up, else python].
set -euo pipefail

usage() {
    sed -n '4p' "$0" | sed 's/^# *//' >&2
    exit 2
}

help() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
}

fail() {
    echo "merge_checkpoint.sh: $*" >&2
    exit 1
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_python="$repo_root/.venv/bin/python"
# This checkout's fspo (its output-folder rule), whichever interpreter runs it; once, when the script runs itself
# again under the folder's lock.
if [[ "${PYTHONPATH:-}" != "$repo_root" && "${PYTHONPATH:-}" != "$repo_root:"* ]]; then
    export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -z "${PYTHON:-}" && -x "$venv_python" ]]; then PYTHON="$venv_python"; fi
PYTHON=${PYTHON:-python}
arguments=("$@")
target_dir=""
trust_remote_code=()
positional=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --target-dir) [[ $# -ge 2 ]] || usage; target_dir=$2; shift 2 ;;
        --target-dir=*) target_dir=${1#*=}; shift ;;
        --trust-remote-code) trust_remote_code=(--trust-remote-code); shift ;;
        -h|--help) help ;;
        -*) echo "merge_checkpoint.sh: unknown option $1" >&2; usage ;;
        *) positional+=("$1"); shift ;;
    esac
done
[[ ${#positional[@]} -ge 1 && ${#positional[@]} -le 2 ]] || usage
run_dir=${positional[0]%/}
step=${positional[1]:-}

[[ -d "$run_dir" ]] || fail "run directory '$run_dir' does not exist (pass the run's trainer.default_local_dir)"

if [[ -z "$step" ]]; then
    latest_file="$run_dir/latest_checkpointed_iteration.txt"
    [[ -f "$latest_file" ]] || fail "'$latest_file' not found: no checkpoint saved in '$run_dir' yet (or pass STEP)"
    step=$(tr -d '[:space:]' < "$latest_file")
fi
[[ "$step" =~ ^[0-9]+$ ]] || fail "STEP must be a non-negative integer, got '$step'"

actor_dir="$run_dir/global_step_$step/actor"
if [[ ! -d "$actor_dir" ]]; then
    available=$(cd "$run_dir" && ls -d global_step_* 2>/dev/null | sed 's/global_step_//' | sort -n | paste -sd " " - || true)
    fail "no checkpoint for step $step: '$actor_dir' does not exist (steps in '$run_dir': ${available:-none})"
fi
target_dir=${target_dir:-$run_dir/global_step_$step/merged}
marker=.fspo_merged_from
# One writer per target folder: the rest of this script runs while fspo holds the folder's lock (fspo/utils/output_dir.py
# hold), so a merge or fspo command already writing there is refused up front, named by its pid and command.
if [[ -z "${FSPO_MERGE_HOLDS_TARGET:-}" ]]; then
    FSPO_MERGE_HOLDS_TARGET=1 exec "$PYTHON" -m fspo.utils.output_dir hold --flag=--target-dir \
        --command=merge_checkpoint.sh "$target_dir" -- bash "${BASH_SOURCE[0]}" "${arguments[@]}"
fi
# fspo's output-folder rule, first on the files every merge writes (the files verl's merger really wrote are
# checked again before they move in); prints the target with a link followed.
rule=("$PYTHON" -m fspo.utils.output_dir --flag=--target-dir --command=merge_checkpoint.sh)
target_dir=$("${rule[@]}" check --no-record "$target_dir" config.json "$marker") || exit 1

[[ -f "$actor_dir/fsdp_config.json" ]] \
    || fail "'$actor_dir' has no fsdp_config.json: not a complete FSDP checkpoint (was the save interrupted?)"
# Every file verl's merger reads, read first with fspo's readers (fspo/utils/input_files.py): a malformed
# fsdp_config.json or huggingface/config.json, a world size below 1, a missing shard, or a shard that is not a
# whole torch file (its zip directory is read, not its tensors) is one line here, not the merger's traceback.
FSPO_ACTOR_DIR="$actor_dir" "$PYTHON" - <<'PY' || exit 1
import os
import sys
import zipfile
from pathlib import Path

from fspo.utils.input_files import InputFileError, read_hf_config, read_json

actor = Path(os.environ["FSPO_ACTOR_DIR"])
try:
    world_size = read_json(actor / "fsdp_config.json").get("world_size")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise InputFileError(f"{actor / 'fsdp_config.json'}: world_size must be an integer >= 1, got {world_size!r}")
    shards = [actor / f"model_world_size_{world_size}_rank_{rank}.pt" for rank in range(world_size)]
    missing = [str(rank) for rank, shard in enumerate(shards) if not shard.is_file()]
    if missing:
        raise InputFileError(
            f"{actor} lacks the model shards of rank(s) {' '.join(missing)} of {world_size} "
            f"(model_world_size_{world_size}_rank_R.pt): was the save interrupted, or only the optimizer kept "
            "(actor.checkpoint.save_contents)?"
        )
    for shard in shards:
        try:
            with zipfile.ZipFile(shard) as archive:
                archive.namelist()
        except (zipfile.BadZipFile, OSError) as error:
            raise InputFileError(f"{shard} is not a whole torch checkpoint file ({error}): was the save interrupted?")
    if not (actor / "huggingface" / "config.json").is_file():
        raise InputFileError(
            f"{actor / 'huggingface'} has no config.json: verl's merger needs the model config saved beside the shards"
        )
    read_hf_config(actor / "huggingface")
except InputFileError as error:
    print(f"merge_checkpoint.sh: {error}", file=sys.stderr)
    sys.exit(1)
PY
created_target=0
[[ -d "$target_dir" ]] || created_target=1
staging="$target_dir/.fspo-staging-merge.$$"
# On failure: no staging left, and no target folder this run created.
trap 'rm -rf "$staging"; if [[ $created_target == 1 ]]; then rmdir "$target_dir" 2>/dev/null || true; fi' EXIT
mkdir -p "$staging"

# verl's merger and the checks below write to a log shown on success; a failure is its last line and the log.
log=$(mktemp "${TMPDIR:-/tmp}/merge_checkpoint.XXXXXX")
logged() {
    local what=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        fail "$what failed: $(grep -v '^\s*$' "$log" | tail -n 1) (its log: $log)"
    fi
    cat "$log" >&2
}

echo "merging $actor_dir -> $target_dir" >&2
logged "verl's merger" "$PYTHON" -m verl.model_merger merge --backend fsdp \
    --local_dir "$actor_dir" --target_dir "$staging" "${trust_remote_code[@]}"

# A LoRA run's checkpoint holds the frozen base and the adapter: verl's merger writes the base as the model and
# the adapter alone to lora_adapter/. fspo/training/lora_fold.py checks the adapter against the run's lora_train_meta.json
# (rank, alpha, target modules) and folds it in (W + lora_alpha/r * B A), stored in float32 so that an update below
# bf16's resolution is kept: the folder is the trained policy.
if [[ -f "$staging/lora_adapter/adapter_config.json" || -f "$actor_dir/lora_train_meta.json" ]]; then
    logged "folding the LoRA adapter" "$PYTHON" -m fspo.training.lora_fold "$staging" "$actor_dir" "${trust_remote_code[@]}"
fi

# Check the result is a loadable Hugging Face model: config, tokenizer, and the weights on CPU.
FSPO_MERGED_DIR="$staging" FSPO_TRUST_REMOTE_CODE=${#trust_remote_code[@]} logged "loading the merged model" "$PYTHON" - <<'PY'
import os

from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

path = os.environ["FSPO_MERGED_DIR"]
trust = os.environ["FSPO_TRUST_REMOTE_CODE"] == "1"
config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust, device_map="cpu")
parameters = sum(p.numel() for p in model.parameters())
print(f"loaded {config.model_type} ({parameters:,} parameters, vocab {len(tokenizer)}) from {path}")
PY
echo "$actor_dir" > "$staging/$marker"
# The merged files replace this script's earlier ones (a file of theirs this merge lacks is deleted); a file
# fspo did not write is never touched, and the whole merge is refused, naming it, if one would be replaced.
"${rule[@]}" install "$staging" "$target_dir" || exit 1
created_target=0
rm -f "$log"
echo "$target_dir"
