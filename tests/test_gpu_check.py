"""scripts/gpu_check.py (`make gpu-check`) in its CPU mode: it runs what a CPU can, writes one
JSON with every number, names what it skipped, and fails loudly."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def gpu_check(out: Path, *arguments: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    return subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(out), *arguments],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_cpu_mode_trains_evaluates_and_says_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = gpu_check(out, "--skip", "tests", "bench", "torchrun", "--epoch-models", "dlgm1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["mode"] == "cpu-smoke" and data["passed"] and data["failures"] == []
    assert data["environment"]["cuda_available"] is False
    skipped = " ".join(data["skipped"])
    for what in ("NCCL", "CUDA graphs", "bench on CUDA", "no CUDA device is visible"):
        assert what in skipped, what
    assert "tests: --skip" in skipped and "short epochs of draw" in skipped
    assert "gpu-check: SKIPPED" in result.stdout
    epochs = data["parts"]["short_epochs"]
    assert set(epochs) == {"dlgm1 vae", "dlgm1 vgp"}
    for name, run in epochs.items():
        assert run["status"] == "passed" and run["run_status"] == "finished", name
        assert run["steps"] == 3 and run["ms_per_step"] > 0, name
        assert math.isfinite(run["test_nll"]), name
    evaluation = data["parts"]["evaluation"]
    assert evaluation["status"] == "passed" and math.isfinite(evaluation["nll"])


def test_a_failed_part_makes_the_exit_status_nonzero(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = gpu_check(out, "--skip", "tests", "bench", "epochs", "torchrun")
    assert result.returncode == 1
    data = json.loads(out.read_text())
    assert data["failures"] == ["evaluation"] and data["passed"] is False
    assert "no checkpoint" in data["parts"]["evaluation"]["reason"]
    assert "gpu-check: FAILED evaluation" in result.stdout


@pytest.mark.slow
def test_the_whole_cpu_smoke_run_passes(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    result = gpu_check(out, "--cpu-smoke")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text())
    parts = data["parts"]
    assert parts["device_tests"]["counts"]["passed"] > 0
    assert "failed" not in parts["device_tests"]["counts"]
    assert set(parts["short_epochs"]) == {"dlgm1 vae", "dlgm1 vgp", "draw vae", "draw vgp"}
    steps = parts["bench"]["steps"]
    assert {"dlgm1 vae fp32", "dlgm1 vgp shared_basis bf16", "draw vae fp32"} <= set(steps)
    assert all(entry["step_ms"] > 0 for entry in steps.values())
    assert parts["torchrun_gloo"]["run_status"] == "finished"
    assert parts["torchrun_gloo"]["steps"] == 4
