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
# EXCLUDED* (metrics.json and config, never checkpoints or data files such as the tests'
# per-example files), their table (md, csv) and validation curves
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
  run_tool vgp-report vgp_bench.analysis.report "$results/runs" --curves "$results/valid_curves.png" \
    >"$results/table.md"
  run_tool vgp-report vgp_bench.analysis.report "$results/runs" --format csv >"$results/table.csv"
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
  run_tool vgp-train vgp_bench.run.commands.train $overrides "$@" trainer.progress=false \
    "hydra.run.dir=$folder" >"$folder.stdout.log" 2>&1 || echo "study: $name stopped (see $folder.stdout.log)"
}

# study_setup NAME: the settings the study scripts share, each overridden by its environment
# variable: STUDY_DIR (run folders), RESULTS_DIR, JOBS (jobs at once, default 1), DATA_DIR,
# THREADS (per job, default 1: keep JOBS x THREADS <= the cores)
study_setup() {
  study_dir=${STUDY_DIR:-outputs/studies/$1}
  results_dir=${RESULTS_DIR:-results/$1}
  jobs=${JOBS:-1}
  data_dir=${DATA_DIR:-data}
  threads=${THREADS:-1}
  export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
}

# the project's VGP default (configs/inference/vgp.yaml) as overrides of a table1_*_vgp experiment,
# which otherwise sets the paper's form
DEFAULT_VGP="inference.prior_mean=identity inference.kernel_variance=0.01"
DEFAULT_VGP+=" inference.mean_field_scale=tied inference.noise_ratio=0.1 inference.outputs=global"

# select_runs [DEFAULT]: the "name|overrides" lines on stdin whose name matches RUNS (a regex;
# DEFAULT when RUNS is unset, else every run)
select_runs() { awk -F'|' -v pattern="${RUNS:-${1:-.}}" '$1 ~ pattern'; }

# run_stage STAGE: the study script's train and report functions, as asked
run_stage() {
  case $1 in
    train) train ;;
    report) report ;;
    all) train; report ;;
    *) echo "usage: $0 train|report|all" >&2; exit 2 ;;
  esac
}
