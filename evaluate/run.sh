#!/usr/bin/env bash
# Evaluate one or more model directories on the prepared benchmarks: a thin wrapper of `fspo evaluate`.
#
#   evaluate/run.sh MODEL_DIR [MODEL_DIR ...] [-- extra fspo evaluate options]
#
# Environment (defaults in brackets):
#   DATA_DIR [data]          folder holding <benchmark>/test.parquet built by `fspo data <benchmark>`
#   BENCHMARKS [gsm8k math500 aime2024 aime2025 truthfulqa halueval halluqa]  names under DATA_DIR
#   OUTPUT_DIR [eval_out]    predictions/, results.{md,json,csv,png}
#   PROMPT_FORMAT []         qwen-base | qwen-instruct | llama-instruct | chatml-think (empty: the model's own template)
#   AIME_SAMPLES [16]        pass@1 on AIME is averaged over this many samples at TEMPERATURE
#   RECIPE []                the recipe that trained the models (a name in recipes/ or a path): MAX_NEW_TOKENS
#                            defaults to its data.max_response_length (4096 for the Qwen3 recipes), so the
#                            evaluation generates as long as training did
#   TEMPERATURE [0.6] TOP_P [0.95] MAX_NEW_TOKENS [RECIPE's response length, else the longest of recipes/ (4096):
#                            no model is cut shorter than its recipe trained it]
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

recipe_length() {  # a recipe's data.max_response_length, as Hydra would resolve it; nothing starts
  FSPO_PRINT_OVERRIDE=data.max_response_length MODEL_PATH=${MODEL_PATH:-unused} bash "$1"
}

DATA_DIR=${DATA_DIR:-data}
BENCHMARKS=${BENCHMARKS:-"gsm8k math500 aime2024 aime2025 truthfulqa halueval halluqa"}
OUTPUT_DIR=${OUTPUT_DIR:-eval_out}
if [[ -z "${MAX_NEW_TOKENS:-}" && -n "${RECIPE:-}" ]]; then
  recipe=$RECIPE
  [[ -f "$recipe" ]] || recipe="$repo_root/recipes/$RECIPE"
  [[ -f "$recipe" ]] || { echo "RECIPE=$RECIPE: no such recipe (a name in recipes/ or a path)" >&2; exit 2; }
  MAX_NEW_TOKENS=$(recipe_length "$recipe") \
    || { echo "RECIPE=$RECIPE: could not read its data.max_response_length; set MAX_NEW_TOKENS" >&2; exit 2; }
  echo "evaluate/run.sh: generating up to $MAX_NEW_TOKENS new tokens, $(basename "$recipe")'s data.max_response_length" >&2
elif [[ -z "${MAX_NEW_TOKENS:-}" ]]; then
  MAX_NEW_TOKENS=0
  for recipe in "$repo_root"/recipes/run_*.sh; do
    length=$(recipe_length "$recipe" 2>/dev/null) || continue
    if [[ $length =~ ^[0-9]+$ ]] && (( length > MAX_NEW_TOKENS )); then MAX_NEW_TOKENS=$length; fi
  done
  (( MAX_NEW_TOKENS > 0 )) || { echo "evaluate/run.sh: no recipe names data.max_response_length; set MAX_NEW_TOKENS" >&2; exit 2; }
  echo "evaluate/run.sh: generating up to $MAX_NEW_TOKENS new tokens, the longest data.max_response_length in recipes/ (RECIPE= for one recipe's)" >&2
fi
if "$PYTHON" -c "import vllm" 2>/dev/null; then default_batch=256; else default_batch=8; fi
common=(--temperature "${TEMPERATURE:-0.6}" --top-p "${TOP_P:-0.95}" --max-new-tokens "$MAX_NEW_TOKENS"
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

# AIME runs separately with k samples; each run writes its own table under OUTPUT_DIR.
if [[ ${#plain[@]} -gt 0 ]]; then
  "$PYTHON" -m fspo.cli evaluate "${models[@]}" "${plain[@]}" --output-dir "$OUTPUT_DIR" "${common[@]}" "$@"
fi
if [[ ${#aime[@]} -gt 0 ]]; then
  "$PYTHON" -m fspo.cli evaluate "${models[@]}" "${aime[@]}" --output-dir "$OUTPUT_DIR/aime" "${common[@]}" \
    --samples "${AIME_SAMPLES:-16}" "$@"
fi
