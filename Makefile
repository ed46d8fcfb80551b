# vgp-bench: `make run` sets up, fetches MNIST, runs the default experiment and prints a table;
# `make test` sets up and runs the fast test suite. Both are idempotent.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUN_DIR ?= outputs/default

.PHONY: setup data run test test-all test-slurm test-mlflow test-variations lint format bench gpu-check tensorboard clean

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make setup: $(PYTHON) not found; install Python 3.11 or pass PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

data: setup
	$(BIN)/vgp-data mnist

run: data
	$(BIN)/vgp-train -m inference=vae,vgp hydra.sweep.dir=$(RUN_DIR) hydra.sweep.subdir='$${hydra:runtime.choices.inference}'
	$(BIN)/vgp-report $(RUN_DIR)
	@echo
	@echo "For comparison, the 100-epoch study (results/vgp_vs_vae/README.md; table.md, by scripts/study_vgp_vs_vae.sh; its runs read a format-1 data/mnist.h5, see that README):"
	@sed -n '/^| method/,/^$$/p' results/vgp_vs_vae/table.md | sed -n '1,/^$$/p'

test: setup
	$(BIN)/pytest -q

test-all: setup
	$(BIN)/pytest -q -m "not slurm and not mlflow"

# the tests marked slurm, on a one-node SLURM cluster started for them and stopped after
# (scripts/slurm_cluster.sh; as root on Debian, installs what is missing; about 10 minutes)
test-slurm: setup
	scripts/test_slurm.sh

# logger=mlflow against a real `mlflow server` on 127.0.0.1 (started and stopped by the test);
# installs the mlflow extra into the venv first
test-mlflow: setup
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[mlflow]'
	$(BIN)/pytest -q -m mlflow tests/test_mlflow.py

# the fast suite under each setting that changes float rounding on this machine (threads, MKL's
# instruction set, torch's CPU capability, another seed) and a table of what failed where;
# VARIATIONS: some of them (scripts/test_variations.sh --list), e.g. VARIATIONS="threads2 seed1"
test-variations: setup
	scripts/test_variations.sh $(VARIATIONS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# BENCH_ARGS: e.g. --threads 2 on a shared machine, --quick for a smoke run
bench: setup
	$(BIN)/python scripts/bench.py --out bench/results.json $(BENCH_ARGS)

# every CUDA path run and timed, one JSON; on a CPU-only machine a tiny smoke run that says
# what it skipped
gpu-check: setup
	$(BIN)/python scripts/gpu_check.py --out gpu_check/results.json

tensorboard: setup
	$(BIN)/tensorboard --logdir outputs

clean:
	rm -rf outputs multirun bench gpu_check .pytest_cache .ruff_cache
