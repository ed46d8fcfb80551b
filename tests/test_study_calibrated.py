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


def study_with_vae_seed_zero(tmp_path: Path, monkeypatch: Any) -> Path:
    """Results under `tmp_path` with the calibration study's tested VAE (86.6, seed 0); the
    calibrated study's runs folder, to be filled."""
    forget_records()
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    calibration_run(
        tmp_path / "calibration" / "runs" / "burda_dlgm1_vae_s0", "finished", 3280, 86.6
    )
    return tmp_path / "calibrated" / "runs"


def test_the_answers_wait_for_their_runs_then_read_the_vaes_spread(
    tmp_path: Path, monkeypatch: Any
) -> None:
    folder = study_with_vae_seed_zero(tmp_path, monkeypatch)
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
    assert answer[0].startswith("- **VAE - VGP: does the VGP beat the VAE here?** IS +1.00 nats: ")
    assert f"+1.00 ± {se:.2f} ({1.0 / se:.1f} SE) if seeds spread as the VAE's do" in answer[0]
    assert (
        "over its 2 seeds, one degree of freedom: the seeds' true spread may be several times "
        f"this); the paper: +1.97. The -bound +1.00 nats: +1.00 ± {se:.2f}" in answer[0]
    )  # the bounds 4 nats above the IS estimates in every run
    assert answer[0].endswith(
        "The VAE's IS minus the VGP's -bound, the paper's comparison if its VGP number is a "
        'bound (its column is "≤", and it does not say which estimator gave it): -3.00 nats: '
        f"-3.00 ± {se:.2f} ({3.0 / se:.1f} SE) if seeds spread as the VAE's do under this "
        f"protocol (standard deviation {spread:.2f} nats over its 2 seeds, one degree of "
        "freedom: the seeds' true spread may be several times this)."
    )
    assert "Waiting for `burda_dlgm1_vgp_control_s0`" in answer[1]


def test_the_vaes_second_seed_pairs_with_the_vgp_over_the_test_images(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The rows have one seed each, not the same one: `--across-seeds` pairs the VAE's seed 1
    with the VGP's seed 0 (and the control's), and the answer gives each paired difference
    beside the unpaired one; the calibration study's VAE, without a per-example file, pairs with
    nothing."""
    folder = study_with_vae_seed_zero(tmp_path, monkeypatch)
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
        f"Paired over the test images: IS `burda_dlgm1_vae_s1` - `burda_dlgm1_vgp_s0` {expected}; "
        f"-bound `burda_dlgm1_vae_s1` - `burda_dlgm1_vgp_s0` {expected}"  # bounds: IS + 4 nats
        in (answer[0])
    )
    assert "burda_dlgm1_vae_s0` -" not in answer[0]
    control = nll["burda_dlgm1_vgp_control_s0"] - nll["burda_dlgm1_vgp_s0"]
    assert (
        f"{float(control.mean()):+.2f}" in answer[1] and "Paired over the test images" in answer[1]
    )


def amend_run(folder: Path, test: dict[str, Any], last_epoch: dict[str, Any]) -> None:
    """Add to a run's test and to its last epoch's record, and give it 100 diagnostics images."""
    record = json.loads((folder / "metrics.json").read_text())
    if record.get("test") is not None:
        record["test"].update(test)
    record["history"][-1].update(last_epoch)
    (folder / "metrics.json").write_text(json.dumps(record))
    config = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(config + "  diagnostics_examples: 100\n")
    forget_records()


def test_the_answer_reads_the_vgps_flexibility_its_khat_shares_and_each_rows_cost(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The VGP's head statistics at its last recorded epoch are read as mean-field or not (the
    control's quoted beside them), the tested runs' k-hat shares warn only when most images
    are above 0.7, and each row's cost comes from the reproduction costs with its step against
    the VAE's."""
    folder = study_with_vae_seed_zero(tmp_path, monkeypatch)
    calibration_run(folder / "burda_dlgm1_vgp_s0", "running", 40, None)
    calibration_run(folder / "burda_dlgm1_vgp_control_s0", "running", 30, None)
    answer = calibrated.calibrated_answer().splitlines()
    assert answer[2].endswith("Waiting for `burda_dlgm1_vgp_s0`'s head statistics.")
    assert answer[5].endswith("Not measured yet: " + ", ".join(
        name for _, name in calibrated.EXPERIMENTS
    ) + ".")  # fmt: skip

    affine = {
        "z/warp_share": 0.7,
        "z/nonlinear_warp_share": 2e-4,
        "z/variance_dispersion": 4e-6,
        "z/total_correlation": 0.02,
    }
    amend_run(folder / "burda_dlgm1_vgp_s0", {}, affine)
    control = {**affine, "z/warp_share": 100.0, "z/total_correlation": 0.0}
    amend_run(folder / "burda_dlgm1_vgp_control_s0", {}, control)
    flexibility = calibrated.calibrated_answer().splitlines()[2]
    assert "The VGP's q at epoch 40 of 3280, still training, on 100 validation images: " in (
        flexibility
    )
    assert "warp share 0.7, nonlinear share 0.0002, variance dispersion 4e-06" in flexibility
    assert "close to a mean-field Gaussian" in flexibility
    assert "The control's q, an affine warp" in flexibility and "at epoch 30 of 3280" in flexibility

    calibration_run(folder / "burda_dlgm1_vgp_s0", "finished", 3280, 85.8)
    amend_run(
        folder / "burda_dlgm1_vgp_s0",
        {"pareto_k_above_0_7": 0.3, "pareto_k_mean": 0.6},
        {**affine, "z/nonlinear_warp_share": 0.05},
    )
    answer = calibrated.calibrated_answer().splitlines()
    assert "The VGP's q at its last epoch (3280)" in answer[2]
    assert "not a mean-field Gaussian in disguise" in answer[2]
    assert "`burda_dlgm1_vgp_s0` 30.0%" in answer[4] and "At most half of them" in answer[4]
    assert "importance weights (k = 5000) have a PSIS k-hat above 0.7: `burda" in answer[4]
    assert answer[4].endswith("Waiting for `burda_dlgm1_vae_s1`, `burda_dlgm1_vgp_control_s0`.")
    amend_run(tmp_path / "calibration" / "runs" / "burda_dlgm1_vae_s0", {
        "pareto_k_above_0_7": 0.94, "pareto_k_mean": 1.2
    }, {})  # fmt: skip
    assert "upper bound in expectation" in calibrated.calibrated_answer().splitlines()[4]

    steps = {
        "burda_dlgm1_vae": 3.0, "burda_dlgm1_vgp": 10.5, "burda_dlgm1_vgp_control": 4.5,
        "burda_dlgm2_vae": 3.3,
    }  # fmt: skip
    rows = {
        name: {
            "step_ms": step, "epochs": 3280, "training_cpu_hours": step * 2.7,
            "evaluation_cpu_hours": 0.2, "measured": "2026-12-06 06:38", "code_version": "v",
            "note": "the trainings paused",
        }
        for name, step in steps.items()
    }  # fmt: skip
    (tmp_path / "reproduction").mkdir()
    (tmp_path / "reproduction" / "costs.json").write_text(json.dumps({"rows": rows}))
    cost = calibrated.calibrated_answer().splitlines()[5]
    assert "(2026-12-06, at v; the trainings paused; results/reproduction/costs.json)" in cost
    assert "(`burda_dlgm1_vgp`) 10.5 ms a step, 3.5x the VAE's, 28.4 CPU-hours" in cost
    assert "(`burda_dlgm1_vae`) 3.0 ms a step, 8.1 CPU-hours for its 3280 epochs" in cost
    assert "(`burda_dlgm1_vgp_control`) 4.5 ms a step, 1.5x the VAE's" in cost


def test_the_two_layer_vae_is_read_against_burdas_and_the_papers_two_layer_vgp(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The 2-layer VAE's answer waits for its run, then gives its IS and bound with their
    errors, Burda et al.'s wider 2-layer VAE, and the paper's 2-layer VGP lead over it."""
    folder = study_with_vae_seed_zero(tmp_path, monkeypatch)
    assert (
        calibrated.calibrated_answer().splitlines()[3].endswith("Waiting for `burda_dlgm2_vae_s0`.")
    )
    calibration_run(folder / "burda_dlgm2_vae_s0", "finished", 3280, 85.9)
    answer = calibrated.calibrated_answer().splitlines()[3]
    assert "here?** IS 85.90, -bound 89.90 (± 0.08 and ± 0.09), 1 seed." in answer
    assert "2-layer VAE on wider deterministic layers: 85.33." in answer
    assert "81.32, would be +4.58 nats better than this VAE's IS (+8.58 against its -bound)" in (
        answer
    )
    assert answer.endswith("the paper's 1-layer VGP leads its VAE by +1.97.")
