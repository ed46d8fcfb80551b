#!/usr/bin/env bash
# Study "vgp_vs_vae" (issues 9, 12): does the VGP beat the mean-field VAE on the same model at equal
# epochs? Binarized MNIST (fixed binarization, 50k/10k/10k), RMSProp with the paper's decay,
# batch 100, EPOCHS (default 100) epochs, settings chosen on the validation bound only.
#
#   scripts/study_vgp_vs_vae.sh pilot     # PILOT_EPOCHS-epoch candidates for the best VGP
#                                         # configuration, compared on the validation bound
#   scripts/study_vgp_vs_vae.sh train     # train every run not yet finished (resumes exactly)
#   scripts/study_vgp_vs_vae.sh eval      # test -log p(x), S = 5000, all 10,000 test images,
#                                         # with the gap diagnostics, once per finished run
#   scripts/study_vgp_vs_vae.sh report    # results/vgp_vs_vae/: table (md, csv), curves, configs
#   scripts/study_vgp_vs_vae.sh all       # the three in order
#   scripts/study_vgp_vs_vae.sh families  # the CPU-budget comparison: every dlgm1 family
#                                         # for FAMILY_EPOCHS (10) epochs, seed 0, tested at the
#                                         # end with S = 1000 on the first 2000 test images;
#                                         # results/dlgm1_families/
#   scripts/study_vgp_vs_vae.sh fixed     # each family's q alone on one fixed decoder (the
#                                         # VAE seed 0's best checkpoint): FIXED_EPOCHS (20)
#                                         # epochs, model frozen, tested as families are;
#                                         # results/fixed_decoder/
#   scripts/study_vgp_vs_vae.sh local     # the same decoder, no encoder: each family fitted
#                                         # alone to each of the first LOCAL_IMAGES (10) test
#                                         # images' posteriors; results/local_gap/
#   scripts/study_vgp_vs_vae.sh statistics  # how each finished run's q uses its latents, on
#                                         # validation images: active units per layer, the
#                                         # posterior spread, the warp statistics;
#                                         # results/vgp_vs_vae/posterior_statistics.{md,json}
#
# JOBS (default 2) jobs of THREADS (default 1) threads each run at once, each in its own run
# folder under STUDY_DIR (default outputs/studies/vgp_vs_vae); a job cut off by the end of a
# session resumes from its last checkpoint when the script is run again. RUNS=regex keeps the
# runs whose name matches. The test split is read by the eval stage only (families: by each
# run's own end-of-training evaluation, once).
source "$(dirname "$0")/common.sh"

stage=${1:-all}
study_dir=${STUDY_DIR:-outputs/studies/vgp_vs_vae}
results_dir=${RESULTS_DIR:-results/vgp_vs_vae}
epochs=${EPOCHS:-100}
jobs=${JOBS:-2}
data_dir=${DATA_DIR:-data}
threads=${THREADS:-1}  # keep JOBS x THREADS <= the cores: oversubscribed threads crawl
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

# The project's best VGP configuration, chosen by the pilots below on the validation bound at
# epoch 10 (seed 0): the identity prior mean with sigma tied to the warp's scale and one set of
# variational outputs shared by all examples (configs/inference/vgp.yaml's defaults).
best="inference.prior_mean=identity inference.kernel_variance=0.01"
best+=" inference.mean_field_scale=tied inference.noise_ratio=0.1 inference.outputs=global"

# name | overrides (one run a line; names carry model, inference and seed), in the order they
# train: the question first (VAE, best VGP, and its control without the GP), then the rest
runs() {
  local seed
  for seed in 0 1 2; do
    echo "dlgm1_vae_s$seed|experiment=table1_dlgm1_vae seed=$seed"
  done
  for seed in 0 1 2; do
    echo "dlgm1_vgp_best_s$seed|experiment=table1_dlgm1_vgp $best seed=$seed"
    # the control: the best configuration with the GP taken out (inference.warp=linear), the
    # same parametrization, objective and r; its q(z | x) is a mean-field Gaussian
    echo "dlgm1_vgp_linear_s$seed|experiment=table1_dlgm1_vgp $best inference.warp=linear seed=$seed"
  done
  echo "dlgm2_vae_s0|experiment=table1_dlgm2_vae seed=0"
  echo "dlgm2_vgp_best_s0|experiment=table1_dlgm2_vgp $best seed=0"
  # its control: does dlgm2's lead over the VAE belong to the GP or to the parametrization?
  echo "dlgm2_vgp_linear_s0|experiment=table1_dlgm2_vgp $best inference.warp=linear seed=0"
  # the paper's form (dense T(h), zero mean) costs about 11x the VAE's step on CPU
  for seed in 0 1 2; do
    echo "dlgm1_vgp_paper_s$seed|experiment=table1_dlgm1_vgp seed=$seed"
  done
  echo "dlgm2_vgp_paper_s0|experiment=table1_dlgm2_vgp seed=0"
  # a second dlgm2 seed of the VAE, the control and the best configuration
  echo "dlgm2_vae_s1|experiment=table1_dlgm2_vae seed=1"
  echo "dlgm2_vgp_linear_s1|experiment=table1_dlgm2_vgp $best inference.warp=linear seed=1"
  echo "dlgm2_vgp_best_s1|experiment=table1_dlgm2_vgp $best seed=1"
  # the dlgm2 control with r fixed at the linear warp's exact inverse: its q, bound and gradient
  # are then the VAE's; does learning r (not the family) make the control train faster?
  echo "dlgm2_vgp_linear_fixed_r_s0|experiment=table1_dlgm2_vgp $best inference.warp=linear inference.aux_correction=none seed=0"
  # the other inference rows of Table 1 under the same protocol; not trained so far
  # (results/vgp_vs_vae/README.md, "What is in the tables"; 10 epochs of each are in
  # results/dlgm1_families/)
  for seed in 0 1 2; do
    echo "dlgm1_nf_s$seed|experiment=table1_dlgm1_nf seed=$seed"
    echo "dlgm1_hvi_s$seed|experiment=table1_dlgm1_hvi seed=$seed"
  done
  echo "dlgm2_iwae_s0|experiment=table1_dlgm2_iwae seed=0"
}

# every dlgm1 family at the same CPU-sized budget (FAMILY_EPOCHS epochs, seed 0)
families() {
  local iwae="trainer.objective=iwae trainer.n_samples=50 trainer.valid_samples=50"
  echo "fam_vae|experiment=table1_dlgm1_vae"
  echo "fam_iwae|experiment=table1_dlgm1_vae $iwae"
  echo "fam_nf|experiment=table1_dlgm1_nf"
  echo "fam_hvi|experiment=table1_dlgm1_hvi"
  echo "fam_vgp_best|experiment=table1_dlgm1_vgp $best"
  echo "fam_vgp_linear|experiment=table1_dlgm1_vgp $best inference.warp=linear"
  echo "fam_vgp_paper|experiment=table1_dlgm1_vgp"
}

# the approximation-gap protocol (Cremer et al. 2018): one fixed decoder, each family's q trained
# from scratch on it; the decoder's log p(x) is the same for every row, so the bound says how much
# of the gap each q closes
fixed() {
  local decoder
  decoder="trainer.init_model=$(realpath -m "${FIXED_DECODER:-$study_dir/dlgm1_vae_s0/checkpoints/best.pt}")"
  decoder+=" trainer.train_model=false"
  echo "fixed_vae|experiment=table1_dlgm1_vae $decoder"
  echo "fixed_vgp_best|experiment=table1_dlgm1_vgp $best $decoder"
  echo "fixed_vgp_linear|experiment=table1_dlgm1_vgp $best inference.warp=linear $decoder"
  # per-example variational outputs: a warp whose bend may differ from image to image
  echo "fixed_vgp_shared_basis|experiment=table1_dlgm1_vgp ${best/outputs=global/outputs=shared_basis} $decoder"
  echo "fixed_nf|experiment=table1_dlgm1_nf $decoder"
  echo "fixed_vgp_paper|experiment=table1_dlgm1_vgp $decoder"
  # not trained so far
  echo "fixed_hvi|experiment=table1_dlgm1_hvi $decoder"
}

# candidates for the project's best VGP configuration (validation bound only)
pilots() {
  local vgp="experiment=table1_dlgm1_vgp inference.prior_mean=identity inference.kernel_variance=0.01"
  # not trained: the reference is dlgm1_vae_s0, the same run's first epochs
  echo "pilot_vae|experiment=table1_dlgm1_vae"
  echo "pilot_identity_global|$vgp inference.outputs=global"
  echo "pilot_identity_shared_basis|$vgp inference.outputs=shared_basis"
  echo "pilot_identity_dense|$vgp inference.outputs=dense"
  echo "pilot_tied_shared_basis|$vgp inference.mean_field_scale=tied inference.outputs=shared_basis"
  echo "pilot_tied_global|$vgp inference.mean_field_scale=tied inference.outputs=global"
  echo "pilot_tied_global_k4|$vgp inference.mean_field_scale=tied inference.outputs=global inference.aux_samples=4"
}

selected_runs() { runs | grep -E "^(${RUNS:-.*})\|" || true; }

train_one() {  # name|overrides
  local name=${1%%|*} overrides=${1#*|} folder="$study_dir/${1%%|*}"
  if [[ -f $folder/metrics.json ]] && grep -q '"status": "finished"' "$folder/metrics.json"; then
    echo "study: $name finished already"; return 0
  fi
  mkdir -p "$study_dir"  # the output goes beside the run folder: vgp-train refuses a folder
  echo "study: training $name"  # that holds other files than a run's
  # shellcheck disable=SC2086
  run_tool vgp-train vgp_bench.run.commands.train $overrides "trainer.epochs=$epochs" \
    trainer.progress=false "data_dir=$data_dir" "hydra.run.dir=$folder" ${TRAIN_EXTRA:-} \
    >"$folder.stdout.log" 2>&1 || echo "study: $name stopped (see $folder.stdout.log)"
}
eval_one() {  # name|overrides: the test set, once, on the checkpoint chosen by validation
  # (a stopped evaluation resumes after its last finished batch: vgp-eval's journal)
  local name=${1%%|*} folder="$study_dir/${1%%|*}"
  [[ -f $folder/metrics.json ]] || return 0
  if ! grep -q '"status": "finished"' "$folder/metrics.json"; then
    echo "study: $name is not finished; train it first"; return 0
  fi
  if grep -q '"is_samples": 5000' "$folder/metrics.json"; then
    echo "study: $name evaluated already"; return 0
  fi
  echo "study: evaluating $name"
  run_tool vgp-eval vgp_bench.run.commands.eval_command "checkpoint=$folder/checkpoints/best.pt" \
    eval.is_samples=5000 eval.subset=null "data_dir=$data_dir" \
    >>"$folder/eval.log" 2>&1 || echo "study: evaluating $name stopped (see $folder/eval.log)"
}
# measure_finished RESULTS: the best checkpoints of the finished runs among the lines
# (name|overrides) on stdin, by vgp_bench.analysis.posterior_statistics (validation images only), into
# RESULTS/posterior_statistics.{md,json}, both written only when every run was measured (with
# RUNS set, merged into them: the other runs' numbers stay); returns 3 when none is finished
measure_finished() {
  local results=$1 line folder python=.venv/bin/python
  local checkpoints=()
  while IFS= read -r line; do
    folder="$study_dir/${line%%|*}"
    if [[ -f $folder/checkpoints/best.pt ]] \
      && grep -q '"status": "finished"' "$folder/metrics.json" 2>/dev/null; then
      checkpoints+=("$folder/checkpoints/best.pt")
    fi
  done
  if [[ ${#checkpoints[@]} -eq 0 ]]; then
    echo "study: $results: no finished run to measure (train first)" >&2
    return 3
  fi
  mkdir -p "$results"
  [[ -x $python ]] || python=python3
  $python -m vgp_bench.analysis.posterior_statistics "${checkpoints[@]}" --data-dir "$data_dir" \
    --out "$results/posterior_statistics.json" --markdown "$results/posterior_statistics.md" \
    ${RUNS:+--merge}
}
export -f train_one eval_one run_tool
export study_dir epochs data_dir TRAIN_EXTRA=${TRAIN_EXTRA:-eval.at_end=false}

case $stage in
  pilot|train|eval|report|all|families|fixed|local|statistics) ;;
  *) echo "usage: $0 pilot|train|eval|report|all|families|fixed|local|statistics" >&2; exit 2 ;;
esac

case $stage in
  pilot)
    epochs=${PILOT_EPOCHS:-10}
    pilots | grep -E "^(${RUNS:-.*})\|" | xargs -d '\n' -P "$jobs" -I{} bash -c 'train_one "$1"' _ {}
    ;;
  families)
    # the budget comparison evaluates at the end of training, once (S = 1000, 2000 images)
    epochs=${FAMILY_EPOCHS:-10}
    TRAIN_EXTRA="eval.at_end=true eval.is_samples=1000 eval.subset=2000"
    families | grep -E "^(${RUNS:-.*})\|" | xargs -d '\n' -P "$jobs" -I{} bash -c 'train_one "$1"' _ {}
    collect_and_report fam_ "${FAMILY_RESULTS_DIR:-results/dlgm1_families}"
    ;;
  fixed)
    epochs=${FIXED_EPOCHS:-20}
    TRAIN_EXTRA="eval.at_end=true eval.is_samples=1000 eval.subset=2000"
    fixed | grep -E "^(${RUNS:-.*})\|" | xargs -d '\n' -P "$jobs" -I{} bash -c 'train_one "$1"' _ {}
    collect_and_report fixed_ "${FIXED_RESULTS_DIR:-results/fixed_decoder}"
    ;;
  local)
    local_results=${LOCAL_RESULTS_DIR:-results/local_gap}
    mkdir -p "$local_results"
    python=.venv/bin/python; [[ -x $python ]] || python=python3
    $python -m vgp_bench.analysis.local_gap \
      "${FIXED_DECODER:-$study_dir/dlgm1_vae_s0/checkpoints/best.pt}" \
      --images "${LOCAL_IMAGES:-10}" --steps "${LOCAL_STEPS:-2000}" --data-dir "$data_dir" \
      --out "$local_results/local_gap.json" 2>"$local_results/local_gap.log" \
      | tee "$local_results/table.md"
    ;;
  statistics)
    # the best checkpoints of the finished study runs, then of the fixed stage's runs; an
    # error stops the stage, and it fails when neither had a finished run
    study_status=0 fixed_status=0
    selected_runs | measure_finished "$results_dir" || study_status=$?
    [[ $study_status -eq 0 || $study_status -eq 3 ]] || exit "$study_status"
    fixed | grep -E "^(${RUNS:-.*})\|" \
      | measure_finished "${FIXED_RESULTS_DIR:-results/fixed_decoder}" || fixed_status=$?
    [[ $fixed_status -eq 0 || $fixed_status -eq 3 ]] || exit "$fixed_status"
    if [[ $study_status -eq 3 && $fixed_status -eq 3 ]]; then exit 1; fi
    ;;
  train|all)
    selected_runs | xargs -d '\n' -P "$jobs" -I{} bash -c 'train_one "$1"' _ {}
    ;;&
  eval|all)
    selected_runs | xargs -d '\n' -P "$jobs" -I{} bash -c 'eval_one "$1"' _ {}
    ;;&
  report|all)
    # every run of the study, pilots included; fam_*, fixed_*: the families and fixed stages'
    # own results
    collect_and_report "" "$results_dir" fam_ fixed_
    ;;
esac
