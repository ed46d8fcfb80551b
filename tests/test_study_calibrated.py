"""The calibrated study's README: where each run stands by the protocol's stages, and the
answers, which wait for their runs' tests and then read the difference against the VAE's spread
between seeds and the paper's lead."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tests.study_folders import calibration_run
from vgp_bench.studies import calibrated
from vgp_bench.studies import runs as study_runs


def test_the_answers_wait_for_their_runs_then_read_the_vaes_spread(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    calibration_run(
        tmp_path / "calibration" / "runs" / "burda_dlgm1_vae_s0", "finished", 3280, 86.6
    )
    folder = tmp_path / "calibrated" / "runs"
    calibration_run(folder / "burda_dlgm1_vae_s1", "running", 45, None)
    calibration_run(folder / "burda_dlgm1_vgp_control_s0", "running", 32, None)
    table = calibrated.calibrated_table()
    assert "| `burda_dlgm1_vae_s1` | 45 of 3280 (stage 5 of 8), running |" in table
    assert "| `burda_dlgm1_vgp_s0` | not started |" in table
    assert all(line.count("|") == table.splitlines()[0].count("|") for line in table.splitlines())
    waiting = calibrated.calibrated_answer().splitlines()
    assert waiting[0].endswith("Waiting for `burda_dlgm1_vae_s1`, `burda_dlgm1_vgp_s0`.")

    study_runs.load.cache_clear()
    calibration_run(folder / "burda_dlgm1_vae_s1", "finished", 3280, 87.0)
    calibration_run(folder / "burda_dlgm1_vgp_s0", "finished", 3280, 85.8)
    answer = calibrated.calibrated_answer().splitlines()
    spread = math.sqrt(((86.6 - 86.8) ** 2 + (87.0 - 86.8) ** 2) / 1)
    se = spread * math.sqrt(1 / 2 + 1)
    assert answer[0].startswith("- **VAE - VGP: does the VGP beat the VAE here?** +1.00 nats: ")
    assert f"+1.00 ± {se:.2f} ({1.0 / se:.1f} SE) if seeds spread as the VAE's do" in answer[0]
    assert answer[0].endswith("; the paper: +1.97.")
    assert "Waiting for `burda_dlgm1_vgp_control_s0`" in answer[1]
