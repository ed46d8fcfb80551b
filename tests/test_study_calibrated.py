"""The calibrated study's README: where each run stands by the protocol's stages, and the
answers, which wait for their runs' tests and then read the difference against the VAE's spread
between seeds and the paper's lead."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tests.study_folders import calibration_run, forget_records, per_example_file
from vgp_bench.studies import calibrated, paired_differences
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.cells import difference_cell


def test_the_answers_wait_for_their_runs_then_read_the_vaes_spread(
    tmp_path: Path, monkeypatch: Any
) -> None:
    forget_records()
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


def test_the_vaes_second_seed_pairs_with_the_vgp_over_the_test_images(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The rows have one seed each, not the same one: `--across-seeds` pairs the VAE's seed 1
    with the VGP's seed 0 (and the control's), and the answer gives each paired difference
    beside the unpaired one; the calibration study's VAE, without a per-example file, pairs with
    nothing."""
    forget_records()
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    calibration_run(
        tmp_path / "calibration" / "runs" / "burda_dlgm1_vae_s0", "finished", 3280, 86.6
    )
    folder = tmp_path / "calibrated" / "runs"
    images = np.random.default_rng(0).gamma(20.0, 4.3, size=10000)  # each image's difficulty
    nll = {
        "burda_dlgm1_vae_s1": images + 0.3,
        "burda_dlgm1_vgp_s0": images - 0.2 + np.random.default_rng(1).normal(0, 0.5, 10000),
        "burda_dlgm1_vgp_control_s0": images,
    }
    for run, values in nll.items():
        calibration_run(folder / run, "finished", 3280, float(values.mean()))
        record = json.loads((folder / run / "metrics.json").read_text())
        record["test"]["per_example_file"] = "test_per_example_k5000.h5"
        (folder / run / "metrics.json").write_text(json.dumps(record))
        per_example_file(folder / run, "test_per_example_k5000.h5", list(values))
    out = tmp_path / "calibrated" / "paired_differences.json"
    assert paired_differences.main([str(folder), str(out)]) == 0
    assert [(p["first"], p["second"]) for p in json.loads(out.read_text())] == [
        ("burda_dlgm1_vgp", "burda_dlgm1_vgp_control")  # seed 0 alone without the flag
    ]
    assert paired_differences.main([str(folder), str(out), "--across-seeds"]) == 0
    pairs = {(p["first"], p["seed"], p["second"], p.get("second_seed")) for p in
             json.loads(out.read_text())}  # fmt: skip
    assert ("burda_dlgm1_vae", 1, "burda_dlgm1_vgp", 0) in pairs
    differences = nll["burda_dlgm1_vae_s1"] - nll["burda_dlgm1_vgp_s0"]
    expected = difference_cell(
        float(differences.mean()), float(differences.std(ddof=1) / math.sqrt(10000)), digits=3
    )
    answer = calibrated.calibrated_answer().splitlines()
    assert (
        f"Paired over the test images: `burda_dlgm1_vae_s1` - `burda_dlgm1_vgp_s0` {expected}"
        in (answer[0])
    )
    assert "burda_dlgm1_vae_s0` -" not in answer[0]
    control = nll["burda_dlgm1_vgp_control_s0"] - nll["burda_dlgm1_vgp_s0"]
    assert (
        f"{float(control.mean()):+.2f}" in answer[1] and "Paired over the test images" in answer[1]
    )
