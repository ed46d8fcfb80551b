"""scripts/study_vgp_vs_vae.sh: its stages' bookkeeping, on run folders made up for the test."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import REPO
from tests.test_report import evaluated, write_run

SCRIPT = REPO / "scripts" / "study_vgp_vs_vae.sh"


def run_stage(stage: str, study: Path, results: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"STUDY_DIR": str(study), "RESULTS_DIR": str(results)}
    return subprocess.run(
        ["bash", str(SCRIPT), stage], env=env, capture_output=True, text=True, timeout=120
    )


def test_report_keeps_metrics_and_configs_of_the_study_runs_only(tmp_path: Path) -> None:
    study, results = tmp_path / "study", tmp_path / "results"
    for seed, name in enumerate(["dlgm1_vae_s0", "pilot_tied_global", "fam_vae", "fixed_vae"]):
        folder = write_run(
            study / name, model="dlgm1", inference="vae", seed=seed, test=evaluated(93.0, 98.0)
        )
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "best.pt").write_bytes(b"never copied")
    done = run_stage("report", study, results)
    assert done.returncode == 0, done.stderr
    kept = sorted(path.name for path in (results / "runs").iterdir())
    assert kept == ["dlgm1_vae_s0", "pilot_tied_global"]  # fam_*, fixed_*: their own stages
    for name in kept:
        assert sorted(p.name for p in (results / "runs" / name).iterdir()) == [
            "config.yaml",
            "metrics.json",
        ]
    assert "DLGM 1hl + VAE" in (results / "table.md").read_text()
    assert (results / "table.csv").read_text().startswith("table,")


def test_an_unknown_stage_prints_the_usage(tmp_path: Path) -> None:
    done = run_stage("nonsense", tmp_path / "study", tmp_path / "results")
    assert done.returncode == 2
    assert "usage:" in done.stderr and "fixed|local" in done.stderr
