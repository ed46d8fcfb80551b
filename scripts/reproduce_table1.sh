#!/usr/bin/env bash
# Table 1 of the paper (binarized MNIST): ten experiments x three seeds at the paper's sizes
# (GPU-sized: k = 5000 importance samples on the full test set), then the table.
#
#   scripts/reproduce_table1.sh                               # one run after another, here
#   scripts/reproduce_table1.sh hydra/launcher=joblib         # a few at once on this machine
#   scripts/reproduce_table1.sh hydra/launcher=slurm hydra.launcher.partition=gpu
#
# Extra arguments go to vgp-train as Hydra overrides. SEEDS=0,1,2,3,4 changes the seeds;
# SWEEP_DIR changes where the runs go (default multirun/table1/<date>_<time>).
source "$(dirname "$0")/common.sh"

if [[ ! -f data/mnist.h5 && " $* " != *" data_dir="* ]]; then
  echo "reproduce_table1: data/mnist.h5 is missing; make it first with: vgp-data mnist" >&2
  exit 1
fi

experiments=table1_dlgm1_vae,table1_dlgm1_vgp,table1_dlgm2_vae,table1_dlgm2_vgp
experiments+=,table1_draw_vae,table1_draw_vgp
# the other inference rows of Table 1, under the same protocol (planar flows, HVI, IWAE)
experiments+=,table1_dlgm1_nf,table1_dlgm1_hvi,table1_dlgm2_iwae,table1_dlgm2_vgp_iwae
sweep_dir=${SWEEP_DIR:-multirun/table1/$(date +%Y-%m-%d_%H-%M-%S)}

mkdir -p "$sweep_dir"
status=0  # a failed run must not hide the table: report first, then fail
run_tool vgp-train vgp_bench.run.commands.train -m \
  "experiment=$experiments" "seed=${SEEDS:-0,1,2}" "hydra.sweep.dir=$sweep_dir" "$@" || status=$?

run_tool vgp-report vgp_bench.analysis.report "$sweep_dir" | tee "$sweep_dir/report.md"
echo "reproduce_table1: runs and report.md in $sweep_dir"
exit "$status"
