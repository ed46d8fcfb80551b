# Sourced by the scripts in this folder: run from the repository root, find the tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# run_tool NAME MODULE ARGS...: .venv/bin/NAME, else NAME on PATH, else python -m MODULE
run_tool() {
  local name=$1 module=$2
  shift 2
  if [[ -x .venv/bin/$name ]]; then .venv/bin/"$name" "$@"
  elif command -v "$name" >/dev/null 2>&1; then "$name" "$@"
  elif [[ -x .venv/bin/python ]]; then .venv/bin/python -m "$module" "$@"
  else python3 -m "$module" "$@"; fi
}
