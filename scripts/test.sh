#!/usr/bin/env bash
# Set up (with test dependencies), lint and format-check, and run the whole test suite, end-to-end CPU runs included.
#   bash scripts/test.sh [pytest args]
# Two pytest-xdist workers share the machine's cores (FSPO_TEST_WORKERS=N for another count, 0 for none): tests
# that share an expensive fixture go to one worker, the longest work first (fspo_testing/scheduling.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
workers=${FSPO_TEST_WORKERS:-2}
parallel=()
if [[ "$workers" != 0 ]]; then parallel=(-n "$workers" --dist loadgroup --no-loadscope-reorder); fi
exec .venv/bin/python -m pytest "${parallel[@]}" --durations=10 "$@"
