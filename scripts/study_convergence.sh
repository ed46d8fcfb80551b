#!/usr/bin/env bash
# Study "convergence": the VAE, the VGP and their no-GP controls compared where the validation
# curves have stopped. The Table 1 protocol (binarized MNIST, fixed binarization, 50k/10k/10k;
# RMSProp with the paper's decay, batch 100), each run trained until the validation bound has
# stopped improving: trainer.early_stopping with patience PATIENCE (50) epochs and min_delta
# MIN_DELTA (0.5) nats (no epoch in the last 50 beat the bound of the last gain by 0.5 nats),
# or the cap of CAP (1000) epochs. best.pt (the best validation bound) is tested once at the
# end, S = 5000 on all 10,000 test images, its per-example values kept in the run folder (the
# report pairs two rows' differences over the test images); nothing is chosen on the test set.
#
#   scripts/study_convergence.sh train    # train every run not yet finished (resumes exactly)
#   scripts/study_convergence.sh report   # results/convergence/: table (md, csv), curves, configs,
#                                         # progress.md (each run's state and curve), README's tables
#   scripts/study_convergence.sh all      # both
#
# Rows (seed 0 first; more seeds where a difference is within 3 standard errors of zero):
#   dlgm1: the VAE, the project's VGP default and its control (the GP taken out);
#   dlgm2: the VAE, the paper's VGP form (dense T(h), zero mean, m = 500) and its twin, the same
#          variational data fitted by an affine map instead of the GP (inference.warp=linear).
# RUNS=regex keeps the matching runs (default: all, in the order listed). JOBS (default 1) jobs
# of THREADS (default 1) threads each at once, each in its own run folder under STUDY_DIR
# (default outputs/studies/convergence); a job cut off by the end of a session resumes from its
# last checkpoint when the script is run again.
source "$(dirname "$0")/common.sh"

study_setup convergence
stopping="trainer.early_stopping.patience=${PATIENCE:-50}"
stopping+=" trainer.early_stopping.min_delta=${MIN_DELTA:-0.5} trainer.epochs=${CAP:-1000}"
# each test keeps its per-example values, so that two rows' difference is also measured paired
# over the test images (report: paired_differences.json)
stopping+=" eval.save_per_example=true"

# name | overrides, in the order they train: dlgm2's paper form and its twin first (the longest,
# and the question the last study left open), then dlgm1
runs() {
  local seed
  for seed in ${SEEDS:-0}; do
    echo "dlgm2_vgp_paper_s$seed|experiment=table1_dlgm2_vgp seed=$seed"
    echo "dlgm2_vgp_paper_affine_s$seed|experiment=table1_dlgm2_vgp inference.warp=linear seed=$seed"
    echo "dlgm2_vae_s$seed|experiment=table1_dlgm2_vae seed=$seed"
    echo "dlgm1_vae_s$seed|experiment=table1_dlgm1_vae seed=$seed"
    echo "dlgm1_vgp_default_s$seed|experiment=table1_dlgm1_vgp $DEFAULT_VGP seed=$seed"
    echo "dlgm1_vgp_linear_s$seed|experiment=table1_dlgm1_vgp $DEFAULT_VGP inference.warp=linear seed=$seed"
  done
}

# shellcheck disable=SC2086
train() { runs | select_runs | train_runs $stopping "data_dir=$data_dir"; }

report() {
  collect_and_report dlgm "$results_dir"
  run_python scripts/paired_differences.py "$study_dir" "$results_dir/paired_differences.json"
  run_python scripts/study_progress.py "$results_dir/runs" --epochs 1,10,25,50,100,200,300,500,1000 \
    --early-stopping "${PATIENCE:-50},${MIN_DELTA:-0.5}" \
    >"$results_dir/progress.md"
  run_python scripts/results_readme.py  # every results README's tables, from results/
}

run_stage "${1:-all}"
