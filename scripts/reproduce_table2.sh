#!/usr/bin/env bash
# Table 2 of the paper (Sketch): DRAW and DRAW + VGP, three seeds each, with the test bound
# recorded after 100, 200 and 300 epochs, then the table.
#
# Needs the Sketch file first (TU-Berlin sketches_png.zip, or the unpacked folder):
#   vgp-data sketch --source /path/to/sketches_png.zip
# or let this script make it: SKETCH_SOURCE=/path/to/sketches_png.zip scripts/reproduce_table2.sh
#
# Extra arguments go to vgp-train as Hydra overrides (e.g. hydra/launcher=slurm).
# SEEDS and SWEEP_DIR as in reproduce_table1.sh.
source "$(dirname "$0")/common.sh"

shopt -s nullglob
sketch_files=(data/sketch-*.h5)
if [[ ${#sketch_files[@]} -eq 0 && " $* " != *" data_dir="* ]]; then
  if [[ -n ${SKETCH_SOURCE:-} ]]; then
    run_tool vgp-data vgp_bench.data.cli sketch --source "$SKETCH_SOURCE"
  else
    echo "reproduce_table2: no data/sketch-*.h5; make it first with:" >&2
    echo "  vgp-data sketch --source /path/to/sketches_png.zip   (or set SKETCH_SOURCE)" >&2
    exit 1
  fi
fi

sweep_dir=${SWEEP_DIR:-multirun/table2/$(date +%Y-%m-%d_%H-%M-%S)}

mkdir -p "$sweep_dir"
status=0  # a failed run must not hide the table: report first, then fail
run_tool vgp-train vgp_bench.run.commands.train -m \
  "experiment=table2_draw_vae,table2_draw_vgp" "seed=${SEEDS:-0,1,2}" \
  "hydra.sweep.dir=$sweep_dir" "$@" || status=$?

run_tool vgp-report vgp_bench.analysis.report "$sweep_dir" | tee "$sweep_dir/report.md"
echo "reproduce_table2: runs and report.md in $sweep_dir"
exit "$status"
