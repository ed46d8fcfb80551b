#!/usr/bin/env bash
# Smoke test of every row of Tables 1 and 2 on the CPU, a few minutes in all: each experiment
# trains for a few steps on a subset, is evaluated with a few importance samples on a few test
# images, and vgp-report makes the tables. The numbers mean nothing; the plumbing is checked.
#
#   scripts/smoke.sh                  # needs data/mnist.h5 (vgp-data mnist)
#   SKETCH_SOURCE=/path/to/sketches_png.zip scripts/smoke.sh   # also makes data/sketch-*.h5
#
# The Sketch rows are skipped, with a message, when no data/sketch-*.h5 exists and
# SKETCH_SOURCE is unset. Extra arguments go to every vgp-train call as Hydra overrides.
# Runs go to outputs/smoke/<date>_<time>/ (or SMOKE_DIR).
source "$(dirname "$0")/common.sh"

if [[ ! -f data/mnist.h5 ]]; then
  echo "smoke: data/mnist.h5 is missing; make it first with: vgp-data mnist" >&2
  exit 1
fi

smoke_dir=${SMOKE_DIR:-outputs/smoke/$(date +%Y-%m-%d_%H-%M-%S)}
mkdir -p "$smoke_dir"
started=$SECONDS
status=0

# sweep NAME EXPERIMENTS OVERRIDES...: one multirun into $smoke_dir/NAME
sweep() {
  local name=$1 experiments=$2
  shift 2
  echo "smoke: $name: $experiments"
  run_tool vgp-train vgp_bench.run.commands.train -m "experiment=$experiments" seed=0 device=cpu \
    trainer.progress=false eval.chunk_size=50 \
    "hydra.sweep.dir=$smoke_dir/$name" \
    'hydra.sweep.subdir=${hydra.job.num}_${hydra:runtime.choices.experiment}' \
    "$@" "${extra[@]}" || status=$?
}
extra=("$@")

# An override of a key that only some experiments' configs have (DRAW's model.steps) needs
# ++: Hydra first composes a multirun's config without its swept experiment= choice.
# Table 1: 20 steps on 2000 images (one epoch), 50 importance samples on 200 test images.
table1=(trainer.max_steps=20 dataset.subset=2000 trainer.valid_subset=200
        eval.is_samples=50 eval.subset=200)
sweep table1_dlgm \
  table1_dlgm1_vae,table1_dlgm1_vgp,table1_dlgm2_vae,table1_dlgm2_vgp "${table1[@]}"
sweep table1_families \
  table1_dlgm1_nf,table1_dlgm1_hvi,table1_dlgm2_iwae,table1_dlgm2_vgp_iwae "${table1[@]}"
sweep table1_draw table1_draw_vae,table1_draw_vgp "${table1[@]}" ++model.steps=4

# Table 2: two epochs of 200 images, the test bound recorded after each.
shopt -s nullglob
sketch_files=(data/sketch-*.h5)
if [[ ${#sketch_files[@]} -eq 0 && -n ${SKETCH_SOURCE:-} ]]; then
  run_tool vgp-data vgp_bench.data.cli sketch --source "$SKETCH_SOURCE"
  sketch_files=(data/sketch-*.h5)
fi
if [[ ${#sketch_files[@]} -eq 0 ]]; then
  echo "smoke: skipping the Sketch rows (table2_draw_vae, table2_draw_vgp): no data/sketch-*.h5;"
  echo "       make it with vgp-data sketch --source /path/to/sketches_png.zip, or set SKETCH_SOURCE"
else
  sweep table2_draw table2_draw_vae,table2_draw_vgp \
    dataset.subset=200 trainer.epochs=2 trainer.max_steps=null 'trainer.eval_at_epochs=[1,2]' \
    trainer.valid_subset=100 eval.epoch_is_samples=10 eval.is_samples=50 eval.subset=100 \
    ++model.steps=4
fi

run_tool vgp-report vgp_bench.analysis.report "$smoke_dir" | tee "$smoke_dir/report.md"
echo "smoke: $((SECONDS - started)) s; runs and report.md in $smoke_dir"
exit "$status"
