#!/usr/bin/env bash
# Set up (with test dependencies), lint and format-check, and run the whole test suite, end-to-end CPU runs included.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
