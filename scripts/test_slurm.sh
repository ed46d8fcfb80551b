#!/usr/bin/env bash
# `make test-slurm`: the tests marked slurm (tests/test_slurm.py) on the one-node cluster of
# scripts/slurm_cluster.sh, with the launchers extra installed. A cluster this script finds up
# (an earlier `scripts/slurm_cluster.sh up`) is left up; one it starts is stopped at the end,
# whatever the tests did. PYTEST_ARGS: more pytest arguments (e.g. -k preempted).
source "$(dirname "$0")/common.sh"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,launchers]'
if ! scripts/slurm_cluster.sh status; then
  trap 'scripts/slurm_cluster.sh down' EXIT
  scripts/slurm_cluster.sh up >/dev/null
fi
eval "$(scripts/slurm_cluster.sh env)"
# shellcheck disable=SC2086
.venv/bin/pytest -q -m slurm tests/test_slurm.py ${PYTEST_ARGS:-}
