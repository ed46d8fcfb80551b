#!/usr/bin/env bash
# Study "calibration": the runner against a published number under its own protocol. DLGM 1hl +
# VAE trained as Burda et al.'s (2016) code trains it (configs/experiment/burda_dlgm1_vae.yaml:
# 60k MNIST training images less 400 held out, dynamic binarization, no shuffling, batch 20,
# their Adam, 8 stages of 3^i epochs = 3280 epochs), tested once at the end with k = 5000 on
# all 10,000 test images, against their 86.76.
#
#   scripts/study_calibration.sh train    # train every run not yet finished (resumes exactly)
#   scripts/study_calibration.sh report   # results/calibration/: table (md, csv), curves, configs,
#                                         # progress.md (each run's state, by stage), README's table
#   scripts/study_calibration.sh all      # both
#
# Runs (RUNS=regex keeps the matching ones): burda_dlgm1_vae_s0, the protocol itself; and
# burda_dlgm1_vae_fixed_s0, the same with the fixed binarization of data/mnist.h5 (the
# protocol's one data difference from the runner's own studies), trained when asked for by
# RUNS. burda_dlgm1_vae_format1_s0, if present, is the protocol trained on a format-1
# data/mnist.h5 (grey levels above 128 one step low; docs/data.md), stopped at epoch 2104 when
# that was found; nothing trains it again, its evaluations on both data files are reported.
# JOBS (default 1) jobs of THREADS (default 1) threads each run at once, each in its own
# run folder under STUDY_DIR (default outputs/studies/calibration); a job cut off by the end of
# a session resumes from its last checkpoint when the script is run again.
source "$(dirname "$0")/common.sh"

study_setup calibration

# name | overrides
runs() {
  echo "burda_dlgm1_vae_s0|experiment=burda_dlgm1_vae seed=0"
  echo "burda_dlgm1_vae_fixed_s0|experiment=burda_dlgm1_vae dataset.binarization=fixed seed=0"
}

# the test keeps its per-example values in the run folder (a few hundred KiB), so two runs tested
# on the same binary test images compare paired over the images
train() {
  runs | select_runs "^burda_dlgm1_vae_s0$" | train_runs eval.save_per_example=true "data_dir=$data_dir"
}

report() {
  collect_and_report burda_ "$results_dir"
  # the paired differences of each run's evaluations on two data files (from the per-example
  # files, which stay in the run folders; a pair measured before its folders went is kept)
  run_python scripts/paired_evaluations.py "$study_dir" "$results_dir/paired_evaluations.json"
  # and of two runs tested on the same test images (the protocol run against each other run)
  run_python scripts/paired_differences.py "$study_dir" "$results_dir/paired_differences.json"
  # where each run stands, and the validation bound at the end of each of the 8 stages
  run_python scripts/study_progress.py "$results_dir/runs" >"$results_dir/progress.md"
  run_python scripts/results_readme.py  # every results README's tables, from results/
}

run_stage "${1:-all}"
