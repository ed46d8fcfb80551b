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

# collect_and_report PREFIX RESULTS [EXCLUDED...]: the runs under $study_dir named PREFIX* but not
# EXCLUDED* (metrics.json and config, never checkpoints), their table (md, csv) and validation
# curves
collect_and_report() {
  local prefix=$1 results=$2 folder name excluded
  shift 2
  mkdir -p "$results/runs"
  for folder in "$study_dir/$prefix"*/; do
    name=$(basename "$folder")
    [[ -f $folder/metrics.json ]] || continue
    for excluded in "$@"; do [[ $name == "$excluded"* ]] && continue 2; done
    mkdir -p "$results/runs/$name"
    cp "$folder/metrics.json" "$folder/config.yaml" "$results/runs/$name/"
  done
  run_tool vgp-report vgp_bench.report "$results/runs" --curves "$results/valid_curves.png" \
    >"$results/table.md"
  run_tool vgp-report vgp_bench.report "$results/runs" --format csv >"$results/table.csv"
  cat "$results/table.md"
}
