#!/usr/bin/env bash
# Set up fspo in a virtual environment at .venv/ in the project root.
#
#   bash scripts/setup.sh            # the package, for this machine (CPU or GPU)
#   bash scripts/setup.sh test       # ... plus the test dependencies
#
# On a machine without CUDA, torch's CPU build is installed first (its version is in
# pyproject.toml, [tool.fspo] cpu-torch) and pinned, so that nothing pulls the CUDA build.
# On a GPU machine (nvidia-smi present) the `gpu` extra brings verl[vllm] with the torch, vLLM and
# transformers it pins, all wheels; then flash-attn from a prebuilt wheel where
# [[tool.fspo.flash-attn-wheels]] has one for this (CUDA, torch, Python, C++ ABI), said in one line,
# and otherwise none (the recipes then use sdpa). Nothing is compiled.
# FSPO_SETUP_TARGET=gpu|cpu overrides that choice. A GPU cluster's head node without a GPU needs gpu: verl
# starts its task runner on the launching node, and it imports vLLM (the GPU set installs without a GPU).
# Packages that ship offline assets ([tool.fspo] offline-assets) are installed without their
# declared dependencies. Re-running is safe and quick.
#
# FSPO_SETUP_DRY_RUN=DIR: install nothing. A throwaway virtualenv in DIR/venv (not .venv) runs each
# step as `pip install --dry-run --report DIR/<step>.json`, and DIR/flash-attn.txt gets the wheel that
# would be picked (empty: none). CI checks the GPU branch this way with a stand-in nvidia-smi on PATH.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

extras=""
[ "${1:-}" = "test" ] && extras="test"
target_set="${FSPO_SETUP_TARGET:-}"
case "$target_set" in
  gpu|cpu|"") ;;
  *) echo "fspo: FSPO_SETUP_TARGET must be gpu or cpu (or unset: detect a GPU), got '$target_set'" >&2; exit 2 ;;
esac
if [ -z "$target_set" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then target_set=gpu; else target_set=cpu; fi
fi

python_bin="${PYTHON:-python3}"
dry_run="${FSPO_SETUP_DRY_RUN:-}"
venv=.venv
if [ -n "$dry_run" ]; then
  mkdir -p "$dry_run"
  dry_run="$(cd "$dry_run" && pwd)"
  venv="$dry_run/venv"
fi
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install --quiet --upgrade pip
# uv resolves on its own (here to the same 157 packages and versions as pip), fetching and unpacking in parallel
# (docs/install.md has the timings). It compiles the bytecode, as pip does: an environment with
# PYTHONDONTWRITEBYTECODE would otherwise compile every module at every start. It reads no pip configuration (a private index in pip.conf, say);
# where it fails, pip installs. A GPU install stays with pip: the GPU dry run (below) checks what pip resolves.
[ -n "$dry_run" ] || [ "$target_set" != cpu ] || python -m pip install --quiet uv || true

# pip install (on a CPU machine through uv where it works), or in a dry run pip's resolution only, reported to
# $dry_run/<step>.json. fast-deps reads a wheel's metadata with HTTP range requests where the index does not
# serve it apart (PEP 658), so the dry run does not download the CUDA wheels (gigabytes). The CPU torch build
# is found by pip, whose configuration may name where it lies, and installed by uv (uv_install).
pip_install() {
  local step="$1"
  shift
  if [ -n "$dry_run" ]; then
    python -m pip install --quiet --dry-run --report "$dry_run/$step.json" --use-feature=fast-deps "$@"
  elif [ "$target_set" = cpu ] && [ -x "$venv/bin/uv" ] && uv_install "$step" "$@"; then
    :
  else
    python -m pip install --quiet "$@"
  fi
}

uv_install() {
  local step="$1" wheels status
  shift
  if [ "$step" != cpu-torch ]; then
    "$venv/bin/uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" "$@"
    return
  fi
  # The CPU torch wheel: pip downloads it (not its dependencies) from where its configuration says; uv installs that
  # file and the dependencies (docs/install.md has the timings).
  wheels="$(mktemp -d)"
  python -m pip download --quiet --no-deps --dest "$wheels" "$@" \
    && "$venv/bin/uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" "$wheels"/*.whl
  status=$?
  rm -rf "$wheels"
  return "$status"
}

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

if [ "$target_set" = gpu ]; then
  target="gpu${extras:+,$extras}"
  pip_install project -e ".[${target}]"
  # The wheel's requirement line (URL and sha256), or nothing; its one line (which wheel, or why none) goes to stderr.
  if [ -n "$dry_run" ]; then
    PYTHONPATH="$PWD" python -m fspo.cli.flash_attn_wheel --report "$dry_run/project.json" > "$dry_run/flash-attn.txt"
  else
    flash_attn_requirement="$(python -m fspo.cli.flash_attn_wheel)"
    if [ -n "$flash_attn_requirement" ]; then
      # --no-deps: its only other requirement, einops, comes with vLLM, and torch must stay as pinned.
      # --require-hashes: pip installs the file only if it has the sha256 pyproject.toml lists for its URL.
      flash_attn_requirements="$(mktemp)"
      echo "$flash_attn_requirement" > "$flash_attn_requirements"
      if ! python -m pip install --quiet --no-deps --require-hashes -r "$flash_attn_requirements" \
          || ! python -c "import flash_attn" 2>/dev/null; then
        python -m pip uninstall --quiet --yes flash-attn 2>/dev/null || true
        echo "fspo: flash-attn: the wheel did not install or load; going without it (the recipes fall back to sdpa)" >&2
      fi
      rm -f "$flash_attn_requirements"
    fi
  fi
else
  cpu_torch="$(read_tool_fspo cpu-torch)"
  echo "$cpu_torch" > "$venv/constraints.txt"
  pip_install cpu-torch "$cpu_torch"
  pip_install project -c "$venv/constraints.txt" -e ".${extras:+[$extras]}"
fi

assets="$(read_tool_fspo offline-assets)"
if [ -n "$assets" ]; then
  # shellcheck disable=SC2086
  pip_install offline-assets --no-deps $assets
fi

if [ -n "$dry_run" ]; then
  echo "fspo: set-up dry run: nothing installed; pip's reports are in $dry_run"
  exit 0
fi

# A torch built for a newer CUDA major than this node's driver installs, but finds no GPU: one line, exit 2.
python -m fspo.launch.cuda_driver

python - <<'PY'
import verl  # noqa: F401  (loads the fspo CPU plugin where there is no accelerator)
from fspo.cpu import cpu_mode_requested
from fspo.cpu.plugin import STATE
if cpu_mode_requested() and not STATE["active"]:
    raise SystemExit(f"fspo: the CPU backend did not load: {STATE}")
print("fspo: set up in .venv (" + ("CPU backend" if STATE["active"] else "GPU") + ")")
PY
