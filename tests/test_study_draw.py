"""The DRAW study (vgp_bench/studies/draw.py): the realizations, the families compared only at
equal epochs, images and samples, the paper form's cost, and the reading of k-hat and the warp."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO as ROOT
from tests.study_folders import (
    draw_run,
    forget_records,
    per_example_file,
)
from vgp_bench.studies import paired_differences
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.cells import difference_cell
from vgp_bench.studies.differences import NO_PAIR
from vgp_bench.studies.draw import (
    draw_differences_table,
    draw_fit_table,
    draw_paper_costs,
    draw_reading,
    draw_realization_spread,
    draw_realizations_table,
    draw_table,
)
from vgp_bench.studies.draw_realizations import realizations


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    forget_records()


def test_the_draw_realizations_table_sets_each_familys_two_realizations_side_by_side(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Each family's lost run and this machine's, at their end-of-training tests; the spread
    between a family's realizations and each machine's VAE - VGP difference, with unpaired
    standard errors; a run still training waits, and the sentence compares the VAE's spread
    with the first machine's lead and, once this machine's pair is tested, says whether the
    difference keeps its sign."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "draw-r" / "runs"
    assert draw_realization_spread("draw-r") == "is not measured yet"
    draw_run(runs / "draw_vae_lost1_s0", "finished", 10, (114.0, 1000, 1000))
    draw_run(runs / "draw_vgp_default_lost1_s0", "finished", 10, (105.0, 1000, 1000))
    draw_run(runs / "draw_vae_s0", "finished", 10, (102.0, 1000, 1000))
    draw_run(runs / "draw_vgp_default_s0", "running", 2, None)
    text = draw_realizations_table("draw-r")
    assert "| DRAW + VAE, this machine's | 10 | -110.00 | 1000 | 1000 | 102.00 ± 0.30 |" in text
    assert "| DRAW + VGP, the default, this machine's | 2 | -118.00 | training, epoch 2 |" in text
    unpaired = difference_cell(12.0, math.hypot(0.3, 0.3))
    assert f"| DRAW + VAE: the first machine's - this machine's | {unpaired} |" in text
    lead = difference_cell(9.0, math.hypot(0.3, 0.3))
    assert f"| VAE - VGP, the first machine's (lost) | {lead} | {NO_PAIR} |" in text
    assert "| VAE - VGP, this machine's | waiting for both runs |" in text
    assert draw_realization_spread("draw-r") == (
        "lie 12.00 nats apart (IS, the first 1000 test images), more than the 9.00 nats by "
        "which the first machine's VGP led its VAE"
    )
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (103.0, 1000, 1000))
    study_runs.load.cache_clear()  # the run's record changed under the module's cache
    assert draw_realization_spread("draw-r") == (
        "lie 12.00 nats apart (IS, the first 1000 test images), more than the 9.00 nats by "
        "which the first machine's VGP led its VAE; the two of DRAW + VGP, the default, lie "
        "2.00 nats apart, and VAE - VGP is +9.00 nats on the first machine's pair and -1.00 on "
        "this machine's: it changes sign from one realization of the pair to the other"
    )
    this_pair = difference_cell(-1.0, math.hypot(0.3, 0.3))
    text = draw_realizations_table("draw-r")
    assert f"| VAE - VGP, this machine's | {this_pair} |" in text
    two = difference_cell(4.0, math.sqrt(50.0) / math.sqrt(2))  # +9 and -1
    mean_row = "| VAE - VGP, the mean over the 2 pairs (standard error over the pairs) |"
    assert f"{mean_row} {two} | — | {two} |" in text
    # a further seed of this machine's is a third pair, and the mean is over the three
    draw_run(runs / "draw_vae_s1", "finished", 10, (100.0, 1000, 1000))
    draw_run(runs / "draw_vgp_default_s1", "running", 3, None)
    study_runs.load.cache_clear()
    assert realizations("draw-r")[2:] == [("this machine's, seed 1", "_s1")]
    text = draw_realizations_table("draw-r")
    assert "| DRAW + VAE, this machine's, seed 1 | 10 | -110.00 | 1000 | 1000 |" in text
    assert "| VAE - VGP, this machine's, seed 1 | waiting for both runs |" in text
    draw_run(runs / "draw_vgp_default_s1", "finished", 10, (99.0, 1000, 1000))
    study_runs.load.cache_clear()
    text = draw_realizations_table("draw-r")
    three = difference_cell(3.0, math.sqrt(56.0 / 2) / math.sqrt(3))  # +9, -1 and +1
    assert (
        "| VAE - VGP, the mean over the 3 pairs (standard error over the pairs) | "
        + (f"{three} | — | {three} |")
        in text
    )


def test_the_draw_tables_compare_the_families_only_at_equal_epochs_images_and_samples(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A tested DRAW run gets its validation bounds by epoch, its test evaluation and the
    paper's converged number beside it; the VAE - VGP difference needs equal epochs, images
    and S; a run still training and a run never started say so."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "draw-a" / "runs"
    draw_run(runs / "draw_vae_s0", "finished", 10, (95.0, 10000, 1000))
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (93.5, 10000, 1000))
    draw_run(runs / "draw_vgp_paper_s0", "running", 3, None)
    text = draw_table("draw-a")
    vae = [cell.strip() for cell in text.splitlines()[2].strip("|").split("|")]
    assert vae == [
        "DRAW + VAE", "10", "-119.00", "-118.00", "-115.00", "-110.00", "10000", "1000",
        "95.00 ± 0.30", "101.00 ± 0.40", "80.97",
    ]  # fmt: skip
    paper = text.splitlines()[4]
    assert "training, epoch 3" in paper and paper.endswith("| 79.88 |")
    differences = draw_differences_table("draw-a")
    se = math.hypot(0.3, 0.3)
    cell = difference_cell(1.5, se)
    expected = f"| VAE - VGP, the default | 10 | {cell} | {NO_PAIR} |"
    assert expected in differences and "10000 images, S = 1000" in differences
    assert "| VAE - VGP, the paper's form | — | — | — | — | waiting for both rows |" in differences

    runs = tmp_path / "draw-b" / "runs"  # the VAE tested on all images too, the VGP not yet
    draw_run(runs / "draw_vae_s0", "finished", 10, (95.0, 1000, 1000))
    record = json.loads((runs / "draw_vae_s0" / "metrics.json").read_text())
    whole = {**record["test"], "n_examples": 10000, "nll": 94.0, "run_steps": record["steps"]}
    record["evaluations"] = [whole]
    (runs / "draw_vae_s0" / "metrics.json").write_text(json.dumps(record))
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (93.5, 1000, 1000))
    # the common test's per-example files kept: its difference paired over the images too
    nll = {"draw_vae_s0": [95.0, 96.0, 94.5, 94.5], "draw_vgp_default_s0": [93.5, 94.1, 93.2, 93.2]}
    for run, values in nll.items():
        record = json.loads((runs / run / "metrics.json").read_text())
        record["test"]["per_example_file"] = "test_per_example_k1000_first1000.h5"
        record["test"]["n_examples"] = 4  # as many as the files hold
        (runs / run / "metrics.json").write_text(json.dumps(record))
        bounds = [value + 6.0 for value in values]  # as draw_run's records have it
        per_example_file(runs / run, "test_per_example_k1000_first1000.h5", values, bounds, 1000)
    assert "94.00 ± 0.30" in draw_table("draw-b")  # the VAE's most precise test
    out = tmp_path / "draw-b" / "paired_differences.json"
    assert paired_differences.main([str(runs), str(out)]) == 0
    differences = draw_differences_table("draw-b")
    paired = [a - b for a, b in zip(*nll.values(), strict=True)]
    paired_cell = difference_cell(statistics.fmean(paired), statistics.stdev(paired) / 2, digits=3)
    expected = f"| VAE - VGP, the default | 10 | {difference_cell(1.5, se)} | {paired_cell} |"
    assert expected in differences and "4 images, S = 1000" in differences
    assert "| DRAW + VGP, the paper's form | not run (PAPER=1) |" in draw_table("draw-b")

    runs = tmp_path / "draw-c" / "runs"
    draw_run(runs / "draw_vae_s0", "finished", 10, (95.0, 10000, 1000))
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (93.5, 10000, 500))
    assert "no test on the same images and S" in draw_differences_table("draw-c")
    runs = tmp_path / "draw-d" / "runs"
    draw_run(runs / "draw_vae_s0", "finished", 10, (95.0, 10000, 1000))
    draw_run(runs / "draw_vgp_default_s0", "finished", 9, (93.5, 10000, 1000))
    assert "not comparable: other epochs" in draw_differences_table("draw-d")
    runs = tmp_path / "draw-e" / "runs"
    draw_run(runs / "draw_vae_s0", "finished", 10, None)
    assert "finished, not tested, epoch 10" in draw_table("draw-e")
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (700.0, 1000, 1000))
    record = json.loads((runs / "draw_vgp_default_s0" / "metrics.json").read_text())
    (runs / "draw_vgp_default_s0" / "metrics.json").write_text(
        json.dumps({**record, "diverged": True})
    )
    assert "700.00 ± 0.30 (diverged)" in draw_table("draw-e")


def test_the_draw_readme_costs_the_paper_form_from_the_measured_times() -> None:
    """The paper form's cost at the DRAW study's defaults: the measured Table 1 row's per-epoch
    CPU-hours (training and validation) times the study's epochs, and its test time per image
    and sample times the test images and the study's S."""
    costs = json.loads((ROOT / "results" / "reproduction" / "costs.json").read_text())
    (row,) = [r for r in costs["rows"].values() if r["command"].endswith("table1_draw_vgp")]
    script_text = (ROOT / "scripts" / "study_draw.sh").read_text()
    defaults = dict(re.findall(r"\$\{(EPOCHS|SAMPLES):-(\d+)\}", script_text))
    epochs, samples = int(defaults["EPOCHS"]), int(defaults["SAMPLES"])
    found = draw_paper_costs()
    per_epoch = row["training_cpu_hours"] / row["epochs"]
    assert found["training_h"] == pytest.approx(epochs * per_epoch, rel=0.01)
    per_test = row["evaluation_cpu_hours"] / (row["test_images"] * row["test_is_samples"])
    assert found["test_h"] == pytest.approx(row["test_images"] * samples * per_test, rel=0.01)
    assert found["step_s"] == pytest.approx(row["step_ms"] / 1000)


def test_the_draw_reading_reads_the_khat_and_the_warp_of_the_tested_runs(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The draw-fit table has a row per tested DRAW run with its bound - IS gap, k-hat share,
    aux gap and warp statistics; the generated reading warns of the IS estimates when most
    images have k-hat above 0.7 and calls the default VGP's q close to mean-field only when
    its warp is affine and its total correlation small."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    study_runs.load.cache_clear()
    runs = tmp_path / "draw-f" / "runs"
    assert draw_reading("draw-f") == "No DRAW run is tested yet."
    draw_run(runs / "draw_vae_s0", "finished", 10, (95.0, 1000, 1000))
    draw_run(runs / "draw_vgp_default_s0", "finished", 10, (93.5, 1000, 1000))
    draw_run(runs / "draw_vgp_paper_s0", "running", 3, None)

    def amend(run: str, test: dict[str, Any], last_epoch: dict[str, Any]) -> None:
        path = runs / run / "metrics.json"
        record = json.loads(path.read_text())
        record["test"].update(test)
        record["history"][-1].update(last_epoch)
        path.write_text(json.dumps(record))
        study_runs.load.cache_clear()

    amend("draw_vae_s0", {"pareto_k_above_0_7": 0.993, "pareto_k_mean": 2.2}, {})
    warp = {
        "z/warp_share": 26.2,
        "z/nonlinear_warp_share": 1e-4,
        "z/variance_dispersion": 4e-5,
        "z/total_correlation": 0.004,
    }
    aux = {"aux_gap": 1.79, "aux_gap_stderr": 0.39, "aux_gap_examples": 100}
    amend("draw_vgp_default_s0", {"pareto_k_above_0_7": 0.999, "pareto_k_mean": 2.1, **aux}, warp)
    lines = draw_fit_table("draw-f").splitlines()
    assert len(lines) == 4  # header, rule, the two tested runs: the running one has no row
    vae = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert vae == ["DRAW + VAE", "1000", "1000", "6.00", "99.3%", "2.20", *["—"] * 5]
    vgp = [cell.strip() for cell in lines[3].strip("|").split("|")]
    assert vgp[3:] == [
        "6.00", "99.9%", "2.10", "1.79 ± 0.39 (100 images)", "26", "0.0001", "4e-05", "0.004",
    ]  # fmt: skip
    reading = draw_reading("draw-f")
    assert "upper bound in expectation" in reading and "on average above 1" in reading
    assert "close to a mean-field Gaussian" in reading
    quoted = "warp share 26.2, nonlinear share 0.0001, variance dispersion 4e-05, total correlation"
    assert quoted in reading

    amend("draw_vgp_default_s0", {"pareto_k_above_0_7": 0.2}, {"z/nonlinear_warp_share": 0.9})
    amend("draw_vae_s0", {"pareto_k_above_0_7": 0.3}, {})
    reading = draw_reading("draw-f")
    assert "upper bound" not in reading and "not a mean-field Gaussian in disguise" in reading
    # the other two conditions, each alone, undo the mean-field reading too
    for spoiled in ({"z/total_correlation": 0.5}, {"z/variance_dispersion": 0.2}):
        amend("draw_vgp_default_s0", {}, {**warp, **spoiled})
        assert "not a mean-field Gaussian in disguise" in draw_reading("draw-f")
    # a warp share below 1 still judges the nonlinear part against q's own noise
    amend("draw_vgp_default_s0", {}, {**warp, "z/warp_share": 0.5, "z/nonlinear_warp_share": 0.005})
    assert "close to a mean-field Gaussian" in draw_reading("draw-f")
    # a VGP run not tested: no row, no sentence of its q; the VAE alone still read
    draw_run(runs / "draw_vgp_default_s0", "running", 4, None)
    study_runs.load.cache_clear()
    assert len(draw_fit_table("draw-f").splitlines()) == 3
    assert "glimpse" not in draw_reading("draw-f")
