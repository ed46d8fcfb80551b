#!/usr/bin/env bash
# Study "draw": the paper's headline model at this machine's budget. DRAW with read/write
# attention (64 glimpses, 2x2 read, 5x5 write) on binarized MNIST (fixed binarization,
# 50k/10k/10k), RMSProp with the paper's decay, batch 100, trained for EPOCHS (default 10)
# epochs with the mean-field VAE and with the VGP (the project's default; the paper's dense form
# too with PAPER=1), equal epochs for both; the final parameters tested once with S = SAMPLES
# (default 1000) importance samples on the first TEST_IMAGES (default 1000) test images, a
# first result; the test stage then evaluates each finished run's final parameters on all
# 10,000 test images at S = SAMPLES, which costs about 4.6 CPU-hours for the VAE and 7.5 for
# the VGP at S = 1000 (1.64 and 2.71 ms an image and sample, one thread, the other core busy,
# 10 images x 100 samples a pass), more than the training; vgp-eval journals its progress, so
# it resumes where a session left it.
#
#   scripts/study_draw.sh train    # train every run not yet finished (resumes exactly)
#   scripts/study_draw.sh test     # every finished run on all 10,000 test images (vgp-eval,
#                                  # added to its metrics.json; resumes)
#   scripts/study_draw.sh report   # results/draw/: table (md, csv), curves, sample grids,
#                                  # canvas sequences, configs, README.md's tables
#   scripts/study_draw.sh all      # train and report
#
# These are CPU runs of a few epochs: compare them with the paper's DRAW numbers (converged,
# on a GPU) only as what they are. The end-of-run auxiliary gap of the VGP runs is measured on
# AUX_GAP_EXAMPLES (default 100) test images (on DRAW each image has 64 sites). SEEDS (default
# "0") are the seeds of each family: one seed's difference between the families is known to the
# precision of its test images only, and two realizations of one seed have differed by more than
# the families (results/draw/README.md), so further seeds (SEEDS="1 2", trained and tested on the
# first test images; `test` then also tests them on all 10,000 unless RUNS leaves them out) are
# what a verdict needs. JOBS (default 1) jobs of THREADS (default 1) threads each at once;
# RUNS=regex keeps the matching runs.
source "$(dirname "$0")/common.sh"

study_setup draw
budget="trainer.epochs=${EPOCHS:-10} eval.is_samples=${SAMPLES:-1000} eval.subset=${TEST_IMAGES:-1000}"
budget+=" eval.aux_gap_examples=${AUX_GAP_EXAMPLES:-100} trainer.image_every=1"
# every test keeps its per-example values: the report pairs the families' difference over the
# test images (paired_differences.json)
budget+=" eval.save_per_example=true"
# 10 images x 100 samples a forward pass on the CPU: 1.2 (VAE) and 1.1 (VGP) times as fast as
# the configs' 100 x 100, whose [10000, 1024] LSTM states leave the cache (one thread, measured
# with nothing else running; a GPU wants the larger batch); the estimates are the same in law
cpu_eval="eval.batch_size=${EVAL_IMAGES:-10}"
budget+=" $cpu_eval"

runs() {
  local seed
  for seed in ${SEEDS:-0}; do
    echo "draw_vae_s$seed|experiment=table1_draw_vae seed=$seed"
    echo "draw_vgp_default_s$seed|experiment=table1_draw_vgp $DEFAULT_VGP seed=$seed"
    if [[ ${PAPER:-0} == 1 ]]; then
      echo "draw_vgp_paper_s$seed|experiment=table1_draw_vgp seed=$seed"
    fi
  done
}

# shellcheck disable=SC2086
train() { runs | select_runs | train_runs $budget "data_dir=$data_dir"; }

# whether a run's record holds an evaluation of its final step on the whole test set at S
tested_whole() {
  run_python - "$1" "${SAMPLES:-1000}" <<'EOF'
import json, sys
record = json.load(open(sys.argv[1]))
whole = [entry for entry in record.get("evaluations") or []
         if entry.get("subset") is None and entry.get("split") == "test"
         and entry.get("is_samples") == int(sys.argv[2])
         and entry.get("run_steps") == record.get("steps")]
sys.exit(0 if whole else 1)
EOF
}

# the final parameters of each finished run on the whole test set, one run at a time
test_all() {
  local line name folder
  while IFS= read -r line; do
    name=${line%%|*}
    folder="$study_dir/$name"
    if ! grep -qs '"status": "finished"' "$folder/metrics.json"; then
      echo "study: $name not finished: not tested on the whole test set"; continue
    fi
    if tested_whole "$folder/metrics.json"; then
      echo "study: $name tested on the whole test set already"; continue
    fi
    echo "study: testing $name on the whole test set, S = ${SAMPLES:-1000}"
    run_tool vgp-eval vgp_bench.run.commands.eval_command "checkpoint=$folder/checkpoints/last.pt" \
      "eval.is_samples=${SAMPLES:-1000}" eval.subset=null eval.save_per_example=true "$cpu_eval" \
      "data_dir=$data_dir" \
      </dev/null >>"$folder.test.log" 2>&1 || echo "study: testing $name stopped (see $folder.test.log)"
  done < <(runs | select_runs)
}

report() {
  collect_and_report draw_ "$results_dir"
  run_python scripts/paired_differences.py "$study_dir" "$results_dir/paired_differences.json"
  local folder name figure
  for folder in "$study_dir"/draw_*/; do
    name=$(basename "$folder")
    [[ -d $results_dir/runs/$name ]] || continue
    for figure in {samples,reconstructions,canvas_steps}.{png,pdf}; do
      [[ -f $folder/$figure ]] && cp "$folder/$figure" "$results_dir/runs/$name/"
    done
  done
  run_python scripts/study_progress.py "$results_dir/runs" --epochs 1,2,3,5,10,20 \
    >"$results_dir/progress.md"
  run_python scripts/results_readme.py  # every results README's tables, from results/
}

case ${1:-all} in
  test) test_all ;;
  train | report | all) run_stage "${1:-all}" ;;
  *) echo "usage: $0 train|test|report|all" >&2; exit 2 ;;
esac
