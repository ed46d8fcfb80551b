"""The calibration study (vgp_bench/studies/calibration.py): each run against the anchor, the
protocol run's status and its one test, the lost runs, the runs tested on other data, and the
other runs against the protocol run on the same test images."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.study_folders import (
    FORMAT_2,
    calibration_cells,
    calibration_run,
    evaluation_record,
    forget_records,
    per_example_file,
    write_run,
)
from vgp_bench.analysis.report.runs import chosen_evaluation
from vgp_bench.studies import paired_differences, paired_evaluations
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.calibration import (
    CALIBRATION_LOST,
    calibration_anchor,
    calibration_data_table,
    calibration_differences_table,
    calibration_reading,
    calibration_status,
    calibration_table,
    calibration_test,
    lost_runs_agreement,
)
from vgp_bench.studies.cells import difference_cell
from vgp_bench.studies.curves import repeat_of


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    forget_records()


def test_the_calibration_table_measures_each_run_against_the_anchor(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The anchor is the paper module's DLGM + VAE number; a tested run gets its IS and bound,
    its distance to the anchor and the verdict (within the tolerance, or by how much it
    misses); a run still training says so; a run never started says so."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    anchor = calibration_anchor()
    assert anchor == 86.76
    runs = tmp_path / "calibration-a" / "runs"
    calibration_run(runs / "burda_dlgm1_vae_s0", "finished", 30, anchor + 0.3, planned=30)
    calibration_run(runs / "burda_dlgm1_vae_fixed_s0", "running", 12, None)
    text = calibration_table("calibration-a")
    cells = calibration_cells(text, "burda_dlgm1_vae_s0")
    assert cells[2:5] == ["format 2, c0ffee00", "30 of 30", "-99.95"]
    assert cells[5:8] == ["-97.10 (29)", "10000", "5000"]
    assert cells[8:] == ["87.06 ± 0.08", "91.06 ± 0.09", "+0.30", "within 0.5 nats"]
    fixed = calibration_cells(text, "burda_dlgm1_vae_fixed_s0")
    assert fixed[3] == "12 of 3280" and fixed[6:] == ["training, epoch 12", *["—"] * 5]

    runs = tmp_path / "calibration-b" / "runs"
    calibration_run(runs / "burda_dlgm1_vae_s0", "finished", 30, anchor + 1.25, planned=30)
    text = calibration_table("calibration-b")
    cells = calibration_cells(text, "burda_dlgm1_vae_s0")
    assert cells[10:] == ["+1.25", "misses: 1.25 nats worse, 0.75 beyond (SE 0.08)"]
    assert calibration_cells(text, "burda_dlgm1_vae_fixed_s0")[3] == "not run"
    assert "no run evaluated on other data yet" in calibration_data_table("calibration-b")


def test_the_calibration_status_says_where_the_protocol_run_stands_and_quotes_its_one_test(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Not started, training, finished without its test, interrupted after a test, stopped
    early, tested: each state in words; the README's numbers come only from the one test a
    finished run got at the end of training, and the verdict reads either side of the anchor."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    anchor = calibration_anchor()
    study = "calibration-status"
    folder = tmp_path / study / "runs" / "burda_dlgm1_vae_s0"
    run = "`burda_dlgm1_vae_s0`"

    def state(status: str, epochs: int, test_nll: float | None, planned: int = 30) -> str:
        calibration_run(folder, status, epochs, test_nll, planned=planned)
        study_runs.load.cache_clear()
        return calibration_status(study)

    assert calibration_status(study) == f"{run} not started"
    assert state("running", 12, None) == f"{run} (seed 0) training, epoch 12 of 30"
    assert state("finished", 30, None) == f"{run} (seed 0) finished, not tested, epoch 30 of 30"
    assert state("interrupted", 20, anchor) == f"{run} (seed 0) training, epoch 20 of 30"
    for untested in ("running", "finished", "interrupted"):
        state(untested, 30, None if untested == "finished" else anchor)
        with pytest.raises(ValueError, match="not tested yet"):
            calibration_test(study)
    assert state("finished", 20, anchor + 1.25) == (
        f"{run} stopped at epoch 20 of 30 (seed 0) and tested once: -log p(x) = 88.01 ± 0.08 "
        "(k = 5000, 10,000 test images), +1.25 nats from the anchor: misses: 1.25 nats worse, "
        "0.75 beyond (SE 0.08)"
    )
    assert state("finished", 30, anchor - 0.3) == (
        f"{run} trained to the end (30 epochs, seed 0) and tested once: -log p(x) = 86.46 ± 0.08 "
        "(k = 5000, 10,000 test images), -0.30 nats from the anchor: within 0.5 nats"
    )
    record = json.loads((folder / "metrics.json").read_text())
    record["test"]["pareto_k_above_0_7"] = 0.9362
    # a later vgp-eval of another checkpoint with more samples: the tables' most precise
    # evaluation, not the protocol's one test
    record["evaluations"] = [{**record["test"], "nll": 80.0, "is_samples": 10000}]
    (folder / "metrics.json").write_text(json.dumps(record))
    study_runs.load.cache_clear()
    assert chosen_evaluation(study_runs.load(study, "burda_dlgm1_vae_s0"))["nll"] == 80.0
    assert calibration_reading(study) == {
        "se": "0.08",
        "images": "10,000",
        "samples": "5000",
        "khat_share": "94%",
        "bound_gap": "4.00",
    }
    assert "-log p(x) = 86.46 ± 0.08" in calibration_status(study)


def test_the_lost_runs_of_the_protocol_are_rows_and_their_agreement_is_measured(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A run lost with its checkout keeps its snapshot as a row that says it was lost and not
    tested; the README's check that the lost runs trained alike is computed from their curves
    over the epochs both reached: the largest gap of the best bounds so far after epoch 100,
    and the largest gap epoch by epoch."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    first, second = CALIBRATION_LOST
    runs = tmp_path / "calibration-lost" / "runs"
    calibration_run(runs / "burda_dlgm1_vae_s0", "running", 5, None)
    curve = [{"epoch": e, "valid_bound": -120.0 + e / 10} for e in range(1, 151)]
    write_run(runs / first, "running", curve, 10, None)
    other = [dict(entry) for entry in curve] + [{"epoch": 151, "valid_bound": -100.0}]
    other[49]["valid_bound"] += 0.5  # epoch 50: 0.5 above; its best so far leads until 54
    other[119]["valid_bound"] -= 0.25  # epoch 120: 0.25 below, its best so far (119's) 0.1
    write_run(runs / second, "running", other, 10, None)
    for run in (first, second):
        (runs / run / "config.yaml").write_text("trainer:\n  epochs: 3280\n")
        record = json.loads((runs / run / "metrics.json").read_text())
        record["dataset"] = FORMAT_2
        (runs / run / "metrics.json").write_text(json.dumps(record))
    epochs, best_gap, epoch_gap = lost_runs_agreement(study="calibration-lost")
    assert epochs == 150
    assert best_gap == pytest.approx(0.1) and epoch_gap == pytest.approx(0.5)
    text = calibration_table("calibration-lost")
    cells = calibration_cells(text, second)
    assert cells[3] == "151 of 3280"
    assert cells[6:] == ["lost at epoch 151 or a little later, not tested", *["—"] * 5]
    assert calibration_cells(text, "burda_dlgm1_vae_s0")[6] == "training, epoch 5"


def test_a_run_tested_on_two_data_files_gets_the_paired_difference(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The format-1 run: its row tests it on its own data (the evaluation that does not say
    which data it read, as older code wrote it), says it is not the protocol's end; the data
    table pairs it with the evaluation of the same parameters on format 2, the standard error
    over the images' differences when both per-example files are kept."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    folder = tmp_path / "calibration" / "runs" / "burda_dlgm1_vae_format1_s0"
    calibration_run(folder, "interrupted", 20, None, planned=30, dataset={"format_version": 1})
    record = json.loads((folder / "metrics.json").read_text())
    own_data = [88.0, 90.0, 86.0, 87.0]
    format_2 = [87.1, 89.2, 85.0, 86.3]  # differences -0.9, -0.8, -1.0, -0.7
    own = {**evaluation_record(87.75, (0.8, 0.9), 4.0, 4, 5000), "run_steps": record["steps"]}
    own["per_example_file"] = "test_per_example_k5000.h5"
    other = {**own, "nll": 86.9, "dataset": FORMAT_2}
    other["per_example_file"] = "test_per_example_k5000_data-c0ffee00.h5"
    stale = {**other, "nll": 80.0, "run_steps": record["steps"] - 10}  # an earlier step's
    record["evaluations"] = [own, stale, other]
    (folder / "metrics.json").write_text(json.dumps(record))
    row = calibration_cells(calibration_table(), "burda_dlgm1_vae_format1_s0")
    assert row[2:4] == ["format 1", "20 of 30"] and row[8] == "87.75 ± 0.80"
    assert row[-1] == "not the protocol: stopped at epoch 20 of 30"
    assert (
        calibration_data_table()
        .splitlines()[-1]
        .endswith("| -0.85 | — (per-example files not kept) |")
    )
    per_example_file(folder, own["per_example_file"], own_data)
    per_example_file(folder, other["per_example_file"], format_2)
    paired = tmp_path / "calibration" / "paired_evaluations.json"
    assert paired_evaluations.main([str(folder.parent), str(paired)]) == 0
    # the run folder gone with a renewed checkout: its pair stays as measured
    measured = paired.read_text()
    assert paired_evaluations.main([str(tmp_path / "renewed"), str(paired)]) == 0
    assert paired.read_text() == measured and len(json.loads(measured)) == 1
    # and measured again, not kept twice, while the folder is there
    assert paired_evaluations.main([str(folder.parent), str(paired)]) == 0
    assert paired.read_text() == measured
    (row,) = [
        calibration_cells(line, "burda_dlgm1_vae_format1_s0")
        for line in calibration_data_table().splitlines()
        if line.startswith("| `burda")
    ]
    differences = [b - a for a, b in zip(own_data, format_2, strict=True)]
    paired = statistics.stdev(differences) / math.sqrt(len(differences))
    assert row == [
        "`burda_dlgm1_vae_format1_s0`", "20", "4", "5000", "format 1", "87.75 ± 0.80",
        "format 2, c0ffee00", "86.90 ± 0.80", "-0.85", f"{paired:.3f}",
    ]  # fmt: skip


def test_the_protocol_run_is_compared_with_each_other_run_on_the_same_test_images(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The calibration differences: the format-1 run's parameters tested on the protocol's data
    (the same file contents and binary draw) pair with the protocol's test over the images, in
    the table's sign (the other run minus the protocol) though the JSON stores the pair the
    other way round; the fixed-binarization twin, tested on the file's own draw, is compared
    unpaired and says why; a run not run, or one not yet tested, says so."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    dynamic = {**FORMAT_2, "binarization": "dynamic", "eval_binarization_seed": 12345}
    runs = tmp_path / "calibration" / "runs"
    protocol, fixed, format1 = (
        runs / f"burda_dlgm1_vae{kind}_s0" for kind in ("", "_fixed", "_format1")
    )
    calibration_run(protocol, "running", 12, None, dataset=dynamic)
    rows = calibration_differences_table().splitlines()[2:]
    assert "`burda_dlgm1_vae_fixed_s0` not run" in rows[0]
    assert "`burda_dlgm1_vae_format1_s0` not run" in rows[1]
    calibration_run(format1, "interrupted", 20, None, planned=30)
    rows = calibration_differences_table().splitlines()[2:]
    waiting = "waiting for the test of `burda_dlgm1_vae_format1_s0` and `burda_dlgm1_vae_s0`"
    assert waiting in rows[1]

    values = {
        "protocol": [86.0, 88.0, 85.0, 87.0],
        "format1 on format 2": [86.9, 89.1, 85.7, 88.3],
        "format1 on format 1": [88.0, 90.0, 86.0, 89.0],
        "fixed": [86.5, 88.0, 85.5, 88.0],
    }

    def test(folder: Path, key: str, name: str, dataset: dict | None = None) -> dict[str, Any]:
        per_example_file(folder, name, values[key])
        test = evaluation_record(statistics.fmean(values[key]), (0.8, 0.9), 4.0, 4, 5000)
        return {**test, "per_example_file": name, **({"dataset": dataset} if dataset else {})}

    for folder, status, dataset in (
        (protocol, "finished", dynamic),
        (fixed, "finished", {**FORMAT_2, "binarization": "fixed"}),
        (format1, "interrupted", {**dynamic, "format_version": 1, "content_sha256": "1" * 64}),
    ):
        calibration_run(folder, status, 30, None, planned=30, dataset=dataset)
    # a dynamic draw with another seed pairs with nothing of another draw; a record older than
    # the draw settings (contents alone) pairs with every test of those contents
    other_draw, older = runs / "burda_dlgm1_vae_otherdraw_s0", runs / "burda_dlgm1_vae_older_s0"
    calibration_run(
        other_draw, "finished", 30, None, dataset={**dynamic, "eval_binarization_seed": 1}
    )
    calibration_run(older, "finished", 30, None, dataset=FORMAT_2)
    own_file = "test_per_example_k5000_data-c0ffee00.h5"  # as the runner names it
    for folder, key in (
        (protocol, "protocol"), (fixed, "fixed"), (other_draw, "fixed"), (older, "fixed")
    ):  # fmt: skip
        record = json.loads((folder / "metrics.json").read_text())
        record["test"] = test(folder, key, own_file)
        (folder / "metrics.json").write_text(json.dumps(record))
    record = json.loads((format1 / "metrics.json").read_text())
    record["evaluations"] = [
        {**test(format1, key, name, dataset), "run_steps": record["steps"]}
        for key, name, dataset in (
            ("format1 on format 1", "test_per_example_k5000.h5", None),
            ("format1 on format 2", "test_per_example_k5000_step300_data-c0ffee00.h5", FORMAT_2),
        )
    ]
    (format1 / "metrics.json").write_text(json.dumps(record))
    study_runs.load.cache_clear()  # the runs' records changed under the module's cache
    out = tmp_path / "calibration" / "paired_differences.json"
    assert paired_differences.main([str(runs), str(out)]) == 0
    pairs = {(pair["first"], pair["second"]): pair for pair in json.loads(out.read_text())}
    assert sorted(pairs) == [
        (f"burda_dlgm1_vae{a}", f"burda_dlgm1_vae{b}")
        for a, b in [("", "_format1"), ("", "_older"), ("_fixed", "_older"),
                     ("_format1", "_older"), ("_older", "_otherdraw")]
    ]  # fmt: skip
    assert pairs[("burda_dlgm1_vae", "burda_dlgm1_vae_format1")]["files"] == [
        own_file, "test_per_example_k5000_step300_data-c0ffee00.h5"
    ]  # fmt: skip

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip("|").split("|")]

    fixed_row, format1_row = (cells(line) for line in calibration_differences_table()
                              .splitlines()[2:])  # fmt: skip
    differences = [a - b for a, b in zip(values["format1 on format 2"], values["protocol"])]
    paired_se = statistics.stdev(differences) / math.sqrt(len(differences))
    mean = statistics.fmean(differences)
    assert format1_row[:9] == [
        "format-1 data - the protocol", "30, 30", "format 2, c0ffee00, drawn once with seed 12345",
        "4", "5000", "87.50 ± 0.80", "86.50 ± 0.80",
        difference_cell(mean, math.hypot(0.8, 0.8)),
        difference_cell(mean, paired_se, digits=3),
    ]  # fmt: skip
    fixed_mean = statistics.fmean(values["fixed"]) - statistics.fmean(values["protocol"])
    assert fixed_row[2] == "format 2, c0ffee00: the file's own draw / drawn once with seed 12345"
    assert fixed_row[7:9] == [
        difference_cell(fixed_mean, math.hypot(0.8, 0.8)),
        "— (other binary draws of the test images)",
    ]


def test_a_run_is_compared_with_the_lost_run_it_repeats(tmp_path: Path, monkeypatch: Any) -> None:
    """repeat_of says whether a run's validation curve equals an earlier run's at every epoch
    both have, or by how much it differs at most, or that they share no epoch yet."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "study" / "runs"

    def curve(values: list[float]) -> list[dict[str, Any]]:
        return [{"epoch": e + 1, "valid_bound": v} for e, v in enumerate(values)]

    write_run(runs / "lost_s0", "unfinished", curve([-100.0, -99.0, -98.5, -98.2]), 10, None)
    write_run(runs / "same_s0", "running", curve([-100.0, -99.0, -98.5]), 10, None)
    write_run(runs / "other_s0", "running", curve([-100.0, -99.25, -98.4, -98.2, -98.0]), 10, None)
    write_run(runs / "new_s0", "running", [], 10, None)
    assert repeat_of("study", "same_s0", "lost_s0") == (
        "repeats `lost_s0`'s validation bound exactly, to the last digit, at each of the 3 "
        "epochs both have"
    )
    assert repeat_of("study", "other_s0", "lost_s0") == (
        "differs from `lost_s0`'s validation bound by at most 0.25 nats over the 4 epochs both have"
    )
    assert repeat_of("study", "new_s0", "lost_s0") == ("has no epoch in common with `lost_s0` yet")
