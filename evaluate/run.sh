#!/usr/bin/env bash
# Evaluate one or more model directories on the prepared benchmarks: a thin wrapper of `fspo evaluate`.
# docs/evaluation.md describes it; tests/test_docs_evaluation.py holds that page and this header to the code.
#
#   evaluate/run.sh MODEL_DIR [MODEL_DIR ...] [-- extra fspo evaluate options]
#
# Environment (defaults in brackets; a relative DATA_DIR or OUTPUT_DIR is in the repository, as the recipes' paths):
#   DATA_DIR [data]          folder holding <benchmark>/test.parquet built by `fspo data <benchmark>`
#   BENCHMARKS [gsm8k math500 aime2024 aime2025 truthfulqa halueval halluqa]  names under DATA_DIR
#   OUTPUT_DIR [eval_out]    predictions/, results.{md,json,csv,png}
#   PROMPT_FORMAT []         qwen-base | qwen-instruct | llama-instruct | chatml-think | passthrough | qwen3
#                            (empty: the model's own template)
#   RECIPE []                the recipe that trained the models (a name in recipes/ or a path): the evaluation
#                            generates as long as it trained (data.max_response_length) and samples as it
#                            validates (actor_rollout_ref.rollout.val_kwargs); a variable set here wins
#   TEMPERATURE [RECIPE's, else 0.6] TOP_P [RECIPE's, else 0.95] TOP_K [RECIPE's, else -1: off]
#   SAMPLES [RECIPE's val_kwargs.n, else 1]  responses per prompt, but on AIME
#   AIME_SAMPLES [16; 1 at TEMPERATURE 0, where every sample is the one greedy response]  pass@1 on AIME is their mean
#   MAX_NEW_TOKENS [RECIPE's response length, else the longest of recipes/: no model is cut shorter than
#                            its recipe trained it]
#   PYTHON [.venv/bin/python if set up, else python]  the interpreter that runs fspo evaluate
#   BATCH_SIZE [256 with vLLM, else 8]
#   VERIFIER []              e.g. hhem: also report the supported step rate of the reasoning
#   JUDGE [] JUDGE_MODEL []  an OpenAI-compatible server (and its model name): LLM-judge TruthfulQA / HalluQA
#                            answers (fspo evaluate --judge; more --judge-* options after --)
set -euo pipefail

models=()
while [[ $# -gt 0 && "$1" != "--" ]]; do models+=(--model "$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
if [[ ${#models[@]} -eq 0 ]]; then
  echo "usage: evaluate/run.sh MODEL_DIR [MODEL_DIR ...] [-- extra fspo evaluate options]" >&2
  exit 2
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# As the recipes and scripts/merge_checkpoint.sh: this checkout's .venv without an activated environment.
if [[ -z "${PYTHON:-}" && -x "$repo_root/.venv/bin/python" ]]; then PYTHON="$repo_root/.venv/bin/python"; fi
PYTHON=${PYTHON:-python}
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's fspo, whichever interpreter runs it
# Every number and folder above is checked once by the environment door (fspo/config/environment.py), before bash,
# awk or fspo evaluate reads it: one line naming the variable, exit 2.
(cd "$repo_root" && "$PYTHON" -m fspo.config.environment evaluate) || exit 2

recipe_value() {  # RECIPE_FILE KEY: the value the recipe gives KEY, the last one as Hydra keeps it; nothing starts
  FSPO_PRINT_OVERRIDE=$2 MODEL_PATH=${MODEL_PATH:-unused} bash "$1"
}
in_repository() {  # PATH: a relative path taken in the repository, where the recipes take theirs
  if [[ "$1" == /* ]]; then echo "$1"; else echo "$repo_root/$1"; fi
}

DATA_DIR=$(in_repository "${DATA_DIR:-data}")
BENCHMARKS=${BENCHMARKS:-"gsm8k math500 aime2024 aime2025 truthfulqa halueval halluqa"}
OUTPUT_DIR=$(in_repository "${OUTPUT_DIR:-eval_out}")
if [[ -n "${RECIPE:-}" ]]; then
  recipe=$RECIPE
  [[ -f "$recipe" ]] || recipe="$repo_root/recipes/$RECIPE"
  [[ -f "$recipe" ]] || { echo "RECIPE=$RECIPE: no such recipe (a name in recipes/ or a path)" >&2; exit 2; }
  from_recipe() {  # VARIABLE KEY: VARIABLE set to the recipe's KEY, unless the environment sets it
    [[ -z "${!1:-}" ]] || return 0
    local value
    value=$(recipe_value "$recipe" "$2") || { echo "RECIPE=$RECIPE: could not read its $2; set $1" >&2; exit 2; }
    printf -v "$1" '%s' "$value"
  }
  if [[ -z "${MAX_NEW_TOKENS:-}" ]]; then
    from_recipe MAX_NEW_TOKENS data.max_response_length
    echo "evaluate/run.sh: generating up to $MAX_NEW_TOKENS new tokens, $(basename "$recipe")'s data.max_response_length" >&2
  fi
  from_recipe TEMPERATURE actor_rollout_ref.rollout.val_kwargs.temperature
  from_recipe TOP_P actor_rollout_ref.rollout.val_kwargs.top_p
  from_recipe TOP_K actor_rollout_ref.rollout.val_kwargs.top_k
  from_recipe SAMPLES actor_rollout_ref.rollout.val_kwargs.n
  echo "evaluate/run.sh: sampling at temperature $TEMPERATURE, top-p $TOP_P, top-k $TOP_K, $SAMPLES sample(s)" \
    "($(basename "$recipe")'s val_kwargs unless set here)" >&2
elif [[ -z "${MAX_NEW_TOKENS:-}" ]]; then
  MAX_NEW_TOKENS=0
  for recipe in "$repo_root"/recipes/run_*.sh; do
    length=$(recipe_value "$recipe" data.max_response_length 2>/dev/null) || continue
    if [[ $length =~ ^[0-9]+$ ]] && (( length > MAX_NEW_TOKENS )); then MAX_NEW_TOKENS=$length; fi
  done
  (( MAX_NEW_TOKENS > 0 )) || { echo "evaluate/run.sh: no recipe names data.max_response_length; set MAX_NEW_TOKENS" >&2; exit 2; }
  echo "evaluate/run.sh: generating up to $MAX_NEW_TOKENS new tokens, the longest data.max_response_length in recipes/ (RECIPE= for one recipe's)" >&2
fi
TEMPERATURE=${TEMPERATURE:-0.6}
TOP_P=${TOP_P:-0.95}
TOP_K=${TOP_K:--1}
SAMPLES=${SAMPLES:-1}
if [[ -z "${AIME_SAMPLES:-}" ]]; then
  # Greedy decoding gives every sample the same response: one is the score.
  if awk -v t="$TEMPERATURE" 'BEGIN { exit !(t + 0 == 0) }'; then AIME_SAMPLES=1; else AIME_SAMPLES=16; fi
fi
if "$PYTHON" -c "import vllm" 2>/dev/null; then default_batch=256; else default_batch=8; fi
common=(--temperature "$TEMPERATURE" --top-p "$TOP_P" --top-k "$TOP_K" --max-new-tokens "$MAX_NEW_TOKENS"
        --batch-size "${BATCH_SIZE:-$default_batch}")
[[ -n "${PROMPT_FORMAT:-}" ]] && common+=(--prompt-format "$PROMPT_FORMAT")
[[ -n "${VERIFIER:-}" ]] && common+=(--verifier "$VERIFIER")
[[ -n "${JUDGE:-}" ]] && common+=(--judge "$JUDGE")  # AIME rows are not judged: its run asks nothing
[[ -n "${JUDGE_MODEL:-}" ]] && common+=(--judge-model "$JUDGE_MODEL")

plain=(); aime=()
for name in $BENCHMARKS; do
  file="$DATA_DIR/$name/test.parquet"
  [[ -f "$file" ]] || { echo "missing $file: build it with 'fspo data $name'" >&2; exit 1; }
  if [[ "$name" == aime* ]]; then aime+=(--data "$name=$file"); else plain+=(--data "$name=$file"); fi
done

# AIME runs separately with k samples; each run writes its own table under OUTPUT_DIR, AIME's in aime/. fspo's output
# rule (fspo/utils/output_dir.py) writes nothing through a link inside an output folder, but fspo evaluate follows a
# link given as its own folder: a link at aime/ is refused here.
if [[ ${#aime[@]} -gt 0 && -L "$OUTPUT_DIR/aime" ]]; then
  echo "evaluate/run.sh: OUTPUT_DIR $OUTPUT_DIR: aime is a symbolic link: fspo writes nothing through a link inside" \
    "its output folder; move it away or give another folder" >&2
  exit 2
fi
if [[ ${#plain[@]} -gt 0 ]]; then
  "$PYTHON" -m fspo.cli evaluate "${models[@]}" "${plain[@]}" --output-dir "$OUTPUT_DIR" "${common[@]}" \
    --samples "$SAMPLES" "$@"
fi
if [[ ${#aime[@]} -gt 0 ]]; then
  "$PYTHON" -m fspo.cli evaluate "${models[@]}" "${aime[@]}" --output-dir "$OUTPUT_DIR/aime" "${common[@]}" \
    --samples "$AIME_SAMPLES" "$@"
fi
