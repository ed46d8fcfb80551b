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

# run_python ARGS...: the project's Python (.venv/bin/python, else python3)
run_python() {
  if [[ -x .venv/bin/python ]]; then .venv/bin/python "$@"; else python3 "$@"; fi
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

# train_runs EXTRA...: train each "name|overrides" line on stdin into $study_dir/name (vgp-train
# with the overrides, then EXTRA), $jobs at once; a finished run is skipped, a stopped one
# resumes from its last checkpoint
train_runs() {
  local running=0 line
  mkdir -p "$study_dir"
  while IFS= read -r line; do
    train_run "$line" "$@" &
    running=$((running + 1))
    if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
  done
  wait
}

train_run() {  # name|overrides EXTRA...
  local name=${1%%|*} overrides=${1#*|} folder="$study_dir/${1%%|*}"
  shift
  if grep -qs '"status": "finished"' "$folder/metrics.json"; then
    echo "study: $name finished already"; return 0
  fi
  echo "study: training $name in $folder"
  # shellcheck disable=SC2086
  run_tool vgp-train vgp_bench.train $overrides "$@" trainer.progress=false \
    "hydra.run.dir=$folder" >"$folder.stdout.log" 2>&1 || echo "study: $name stopped (see $folder.stdout.log)"
}
