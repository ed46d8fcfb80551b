#!/usr/bin/env bash
# The fast suite under each setting that changes float rounding on this one machine, then a table
# (variation, passed, failed, the failing test ids). A test that passes here only under some of
# them compares float results with a tolerance the computation does not justify.
#
#   scripts/test_variations.sh                         # every variation, the whole fast suite
#   scripts/test_variations.sh threads2 mkl_sse4_2     # only these variations
#   scripts/test_variations.sh -- tests/test_gp.py     # pytest arguments after --
#   scripts/test_variations.sh --list                  # the variations and their settings
#
# Variations (each a fresh pytest process, every other rounding setting left at its default):
#   default       nothing set
#   threads1      OMP_NUM_THREADS=1 VGP_TEST_THREADS=1 (conftest's torch threads; 1 is its default)
#   threads2      OMP_NUM_THREADS=2 VGP_TEST_THREADS=2 (threaded reductions split differently;
#                 OMP_WAIT_POLICY=PASSIVE, which changes no result, keeps it fast on a busy machine)
#   mkl_sse4_2    MKL_ENABLE_INSTRUCTIONS=SSE4_2 (MKL's BLAS/LAPACK kernels: matmul, Cholesky)
#   mkl_avx2      MKL_ENABLE_INSTRUCTIONS=AVX2
#   mkl_avx512    MKL_ENABLE_INSTRUCTIONS=AVX512 (only where /proc/cpuinfo lists avx512f)
#   aten_default  ATEN_CPU_CAPABILITY=default (torch's own kernels without SIMD dispatch)
#   seed1         VGP_TEST_SEED=1 (tests/helpers.py's varied_seed: other draws for the tests whose
#                 claim holds for every draw; statistical tests keep their seeds)
#   combined      all of threads2, mkl_sse4_2, aten_default and seed1 at once: the one run
#                 furthest from the default (.ci/run runs it on the numerical tests)
# The MKL variations act only on a torch built with MKL (BLAS_INFO=mkl); on another BLAS they
# are skipped with a message. Logs go to $VARIATIONS_DIR (default outputs/test_variations/).
# Exits 1 if any variation had a failure.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

declare -A settings=(
  [default]=""
  [threads1]="OMP_NUM_THREADS=1 VGP_TEST_THREADS=1"
  [threads2]="OMP_NUM_THREADS=2 VGP_TEST_THREADS=2 OMP_WAIT_POLICY=PASSIVE"
  [mkl_sse4_2]="MKL_ENABLE_INSTRUCTIONS=SSE4_2"
  [mkl_avx2]="MKL_ENABLE_INSTRUCTIONS=AVX2"
  [mkl_avx512]="MKL_ENABLE_INSTRUCTIONS=AVX512"
  [aten_default]="ATEN_CPU_CAPABILITY=default"
  [seed1]="VGP_TEST_SEED=1"
)
settings[combined]="${settings[threads2]} ${settings[mkl_sse4_2]} ${settings[aten_default]}"
settings[combined]+=" ${settings[seed1]}"
order=(default threads1 threads2 mkl_sse4_2 mkl_avx2 mkl_avx512 aten_default seed1 combined)
# the settings a variation changes, cleared first so that the caller's environment is no variation
cleared=(OMP_NUM_THREADS MKL_NUM_THREADS OMP_WAIT_POLICY VGP_TEST_THREADS MKL_ENABLE_INSTRUCTIONS
  MKL_CBWR ATEN_CPU_CAPABILITY VGP_TEST_SEED)

chosen=()
pytest_args=()
while (($#)); do
  case $1 in
    --list)
      for name in "${order[@]}"; do printf '%-13s %s\n' "$name" "${settings[$name]:-(none)}"; done
      exit 0 ;;
    --) shift; pytest_args=("$@"); break ;;
    *)
      [[ -v settings[$1] ]] || { echo "test_variations: unknown variation $1 (--list)" >&2; exit 2; }
      chosen+=("$1") ;;
  esac
  shift
done
((${#chosen[@]})) || chosen=("${order[@]}")

python=.venv/bin/python
[[ -x $python ]] || python=python3
blas=$("$python" -c 'import torch; print("mkl" if torch.backends.mkl.is_available() else "other")')
has_avx512=false
grep -qw avx512f /proc/cpuinfo 2>/dev/null && has_avx512=true
echo "test_variations: torch $("$python" -c 'import torch; print(torch.__version__)'), BLAS: $blas," \
  "avx512f: $has_avx512, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"

log_dir=${VARIATIONS_DIR:-outputs/test_variations}
mkdir -p "$log_dir"
rows=()
status=0
for name in "${chosen[@]}"; do
  setting=${settings[$name]}
  if [[ $name == mkl_* && $blas != mkl ]]; then
    rows+=("$name|-|-|skipped: torch has no MKL")
    continue
  fi
  if [[ $name == mkl_avx512 && $has_avx512 != true ]]; then
    rows+=("$name|-|-|skipped: no avx512f in /proc/cpuinfo")
    continue
  fi
  log=$log_dir/$name.log
  echo "test_variations: $name (${setting:-nothing set}) -> $log"
  started=$SECONDS
  # shellcheck disable=SC2086  # $setting is a list of NAME=VALUE words
  if ! env "${cleared[@]/#/--unset=}" $setting "$python" -m pytest -q -rfE "${pytest_args[@]}" \
    >"$log" 2>&1; then
    status=1
  fi
  summary=$(tail -n 1 "$log")
  passed=0 failed=0
  [[ $summary =~ ([0-9]+)\ passed ]] && passed=${BASH_REMATCH[1]}
  [[ $summary =~ ([0-9]+)\ failed ]] && failed=${BASH_REMATCH[1]}
  [[ $summary =~ ([0-9]+)\ error ]] && failed=$((failed + BASH_REMATCH[1]))
  failures=$(grep -E '^(FAILED|ERROR) ' "$log" | cut -d' ' -f2 | paste -sd' ' || true)
  rows+=("$name|$passed|$failed|$failures ($((SECONDS - started)) s)")
  echo "  $summary"
done

echo
printf '| %-13s | %6s | %6s | %s |\n' variation passed failed "failing tests (time)"
printf '|%s|%s|%s|%s|\n' --------------- -------: -------: ---
for row in "${rows[@]}"; do
  IFS='|' read -r name passed failed rest <<<"$row"
  printf '| %-13s | %6s | %6s | %s |\n' "$name" "$passed" "$failed" "$rest"
done
exit $status
