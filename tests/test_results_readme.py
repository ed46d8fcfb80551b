"""The results READMEs quote no number by hand: tables and numbers are generated from the runs.

Checked: every table between `<!-- table:NAME -->` markers and every number between
`<!-- v:NAME -->` markers in the results READMEs (vgp_vs_vae, dlgm1_families, convergence,
calibration, draw) equals what vgp_bench/studies computes from the committed runs (test
IS and bound with their standard errors, bound - IS, aux gap, k-hat share, validation bounds by
epoch and best, differences between methods with unpaired standard errors and per-seed
differences, the pilots' and the fixed decoder's warp statistics, the local-gap fits, the family
runs' wall_time_s, the convergence rows at their stop and their differences, the calibration run
against its anchor and the other calibration runs against it, the DRAW runs and their
difference, and the prose numbers: the dlgm2 leads over the VAE, the fixed-r control's test and
validation gaps, the dlgm1 leads, the family study's gains, costs and shared runs); and outside
those places no decimal number appears in the READMEs' text (bar the named constants and the
calibration protocol's settings, which are checked against the code), nor in the top-level
README. The integer settings the calibration and DRAW READMEs quote (epochs, batch, hold-out, S,
test images, the architecture) are checked against the configs and the study script's defaults.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from vgp_bench.analysis.paired import data_read
from vgp_bench.analysis.report.runs import chosen_evaluation
from vgp_bench.studies import paired_differences, paired_evaluations
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.answers import answer_rows, seed_spread
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
from vgp_bench.studies.cells import difference_cell, signed
from vgp_bench.studies.convergence import (
    QUESTIONS,
    convergence_answer,
    convergence_differences_table,
    convergence_table,
    stop_gains,
)
from vgp_bench.studies.curves import lead_at_stops, realization_gap, repeat_of
from vgp_bench.studies.differences import NO_PAIR, paired_values, seeds_for_three_se
from vgp_bench.studies.differences import difference as row_difference
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
from vgp_bench.studies.readme import STUDIES, readme_path, render
from vgp_bench.studies.spread import chi_square_quantile, deviation_interval

ROOT = Path(__file__).resolve().parent.parent
# decimals that are settings or architecture, not results
CONSTANTS = {"0.7", "7.5M"}  # the PSIS k-hat threshold; the dense T(h) layer's weights
README_CONSTANTS = {"3.11"}  # the Python version


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    study_runs.load.cache_clear()
    study_runs.valid_curve.cache_clear()


def loose_decimals(text: str) -> list[str]:
    """Decimal numbers outside generated tables and values and outside section references."""
    text = re.sub(r"<!-- table:[\w.-]+ -->.*?<!-- /table -->", "", text, flags=re.S)
    text = re.sub(r"<!-- v:[\w.-]+ -->.*?<!-- /v -->", "", text, flags=re.S)
    text = re.sub(r"sections? \d+(\.\d+)*", "", text)
    return [n for n in re.findall(r"(?<![\w.])\d+\.\d+\w*", text) if n not in CONSTANTS]


def test_a_study_on_old_mnist_data_says_so() -> None:
    """A results README whose committed runs read an MNIST file of an older format than the
    converter writes names that format and points to docs/data.md, which says what was wrong
    with it; a study whose runs are all of the current format needs no such notice."""
    from vgp_bench.data.mnist import FORMAT_VERSION, OLD_FORMATS

    seen = set()
    for readme in sorted((ROOT / "results").glob("*/README.md")):
        study = readme.parent
        runs = [*study.glob("runs/*/metrics.json")]
        if study.name == "vgp_vs_vae":  # its README also reports these studies' runs
            runs += [*(ROOT / "results" / "fixed_decoder").glob("runs/*/metrics.json")]
        formats = {
            json.loads(path.read_text()).get("dataset", {}).get("format_version")
            for path in runs
            if json.loads(path.read_text()).get("dataset", {}).get("name") == "mnist"
        }
        text = readme.read_text()
        for old in sorted(version for version in formats if version != FORMAT_VERSION):
            assert old in OLD_FORMATS, (study.name, old)
            assert f"format {old}" in text and "docs/data.md" in text, study.name
            seen.add(study.name)
    assert {"vgp_vs_vae", "dlgm1_families"} <= seen


def test_generated_tables_and_numbers_are_up_to_date() -> None:
    """Every generated table and number equals what the runs give."""
    for study in STUDIES:
        text = readme_path(study).read_text()
        assert render(text, study) == text, f"run scripts/results_readme.py ({study.name})"


def test_every_marker_names_a_generator() -> None:
    """A table or value name its study does not declare fails instead of vanishing."""
    for study in STUDIES:
        text = readme_path(study).read_text()
        assert set(re.findall(r"<!-- table:([\w.-]+) -->", text)) <= set(study.tables)
        assert set(re.findall(r"<!-- v:([\w.-]+) -->", text)) <= set(study.values)


def test_every_readme_with_generated_places_is_a_declared_study() -> None:
    """A results README with a generated table or value has its study declared, once; a study's
    README is results/<study>/README.md."""
    names = [study.name for study in STUDIES]
    assert len(names) == len(set(names))
    marked = {
        path.parent.name
        for path in (ROOT / "results").glob("*/README.md")
        if re.search(r"<!-- (table|v):[\w.-]+ -->", path.read_text())
        and path.parent.name != "reproduction"  # its costs table: reproduction_costs.py's
    }
    assert marked == set(names)
    assert all(
        readme_path(study) == ROOT / "results" / study.name / "README.md" for study in STUDIES
    )


def calibration_protocol_decimals() -> set[str]:
    """The settings results/calibration/README.md's protocol section quotes, from the code:
    the staged step-size factors (vgp_bench.schedules), the optimizer's betas (configs/optim),
    the output bias's clip range (models/dlgm.py), and their paper's beta1 (a quote)."""
    from omegaconf import OmegaConf

    from vgp_bench.models.dlgm import OUTPUT_BIAS_CLIP
    from vgp_bench.schedules import burda_stages, total_stage_epochs

    stage_starts = [total_stage_epochs(stages) for stages in range(8)]  # 0, 1, 4, 13, ...
    factors = {f"{burda_stages(epoch, 1):g}" for epoch in stage_starts}
    betas = OmegaConf.load(ROOT / "configs" / "optim" / "burda_adam.yaml").optimizer.betas
    clip = {f"{bound:g}" for bound in OUTPUT_BIAS_CLIP}
    return factors | {f"{beta:g}" for beta in betas} | clip | {"0.9"}


def section(text: str, heading: str) -> str:
    """A markdown section's text, from its heading to the next heading of its level."""
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following >= 0 else len(text)]


def test_no_number_is_quoted_by_hand() -> None:
    """Outside generated places the results READMEs hold no decimal number, bar the
    calibration protocol section's settings, which must be the code's."""
    for study in (study.name for study in STUDIES):
        text = (ROOT / "results" / study / "README.md").read_text()
        if study == "calibration":
            protocol = section(text, "## Protocol")
            assert set(loose_decimals(protocol)) <= calibration_protocol_decimals()
            text = text.replace(protocol, "")
        assert loose_decimals(text) == [], study


def test_the_calibration_protocol_quotes_every_stage_step_size() -> None:
    """The README's schedule row lists the code's eight factors in order."""
    from vgp_bench.schedules import burda_stages, total_stage_epochs

    text = (ROOT / "results" / "calibration" / "README.md").read_text()
    factors = [burda_stages(total_stage_epochs(stages), 1) for stages in range(8)]
    assert ", ".join(f"{factor:g}" for factor in factors) + " (x 1e-4)" in text


def test_the_top_readme_quotes_no_result() -> None:
    """The top-level README points at the studies instead of copying their numbers."""
    text = (ROOT / "README.md").read_text()
    assert [n for n in loose_decimals(text) if n not in README_CONSTANTS] == []


def test_the_quoted_overstatements_stay_mended() -> None:
    """The numbers issue 24 named: the smallest dlgm2 lead, the fixed-r control behind the VAE,
    its largest validation gap (epoch 11), and the family runs' wall-clock range."""
    values = {name: compute() for study in STUDIES for name, compute in study.values.items()}
    assert values["dlgm2.lead.min"] == "1.80"
    assert values["dlgm2.fixed_r.behind"] == "0.09"
    assert (values["dlgm2.fixed_r.max_gap"], values["dlgm2.fixed_r.max_gap_epoch"]) == (
        "2.61",
        "11",
    )
    assert (values["families.wall.min"], values["families.wall.max"]) == ("48", "1022")


def test_the_convergence_tables_pool_tested_rows_and_say_where_the_others_are() -> None:
    """Run on the 100-epoch study's runs: a tested row gets its epochs, test numbers and head
    statistics at the tested epoch, a missing row is queued, and a pair with a common seed
    gets its difference and whether it calls for more seeds."""
    lines = convergence_table("vgp_vs_vae").splitlines()
    paper = next(line for line in lines if line.startswith("| DLGM 2hl + VGP, the paper's form"))
    test = study_runs.test_of("vgp_vs_vae", "dlgm2_vgp_paper_s0")
    metrics = study_runs.load("vgp_vs_vae", "dlgm2_vgp_paper_s0")
    cells = [cell.strip() for cell in paper.strip("|").split("|")]
    assert cells[1] == "0" and cells[2] == f"{metrics['epochs_completed']} (cap)"
    assert cells[3] == f"{metrics['wall_time_s'] / 3600:.1f}"  # the training epochs' time
    assert cells[6] == f"{test['nll']:.2f} ± {test['nll_stderr']:.2f}"
    tested_at = next(e for e in metrics["history"] if e["epoch"] == study_runs.best_epoch(metrics))
    assert cells[8] == f"{tested_at['z/warp_share']:.3f}"
    assert cells[11] == f"{test['pareto_k_above_0_7']:.2f}"
    vae = next(line for line in lines if line.startswith("| DLGM 2hl + VAE"))
    assert "0, 1" in vae and vae.count("—") == 3  # no head diagnostics for the VAE
    assert any(
        line.startswith("| DLGM 2hl + the paper form's twin") and "queued" in line for line in lines
    )
    differences = convergence_differences_table("vgp_vs_vae")
    vae_test = study_runs.test_of("vgp_vs_vae", "dlgm2_vae_s0")
    se = math.hypot(vae_test["nll_stderr"], test["nll_stderr"])
    cell = difference_cell(vae_test["nll"] - test["nll"], se)
    assert f"| dlgm2: VAE - the paper's VGP | 0 | {cell} |" in differences


def write_run(
    folder: Path,
    status: str,
    history: list[dict[str, Any]],
    steps_per_epoch: int,
    test: dict[str, Any] | None,
) -> None:
    """A run folder's metrics.json: its status, validation curve and maybe its test."""
    folder.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "status": status,
        "epochs_completed": len(history),
        "steps": steps_per_epoch * len(history),
        "history": history,
    }
    if test is not None:
        record["test"] = test
    (folder / "metrics.json").write_text(json.dumps(record))


def evaluation_record(
    nll: float, standard_errors: tuple[float, float], gap: float, images: int, samples: int
) -> dict[str, Any]:
    """A test evaluation: IS and bound (the bound `gap` nats above) with their errors."""
    return {
        "nll": nll,
        "nll_stderr": standard_errors[0],
        "bound_nll": nll + gap,
        "bound_nll_stderr": standard_errors[1],
        "is_samples": samples,
        "n_examples": images,
        "split": "test",
    }


def run_with_test(
    folder: Path, nll: float, hours: float, per_example_file: str | None = None
) -> None:
    """A finished run of one epoch tested at S = 5000 on 10,000 images, trained for `hours`."""
    test = evaluation_record(nll, (0.25, 0.3), 5.0, 10000, 5000)
    if per_example_file is not None:
        test["per_example_file"] = per_example_file
    write_run(folder, "finished", [{"epoch": 1, "valid_bound": -90.0}], 10, test)
    record = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps({**record, "wall_time_s": 3600 * hours}))


FORMAT_2 = {"format_version": 2, "content_sha256": "c0ffee00" * 8}


def calibration_run(
    folder: Path,
    status: str,
    epochs: int,
    test_nll: float | None,
    planned: int = 3280,
    dataset: dict[str, Any] | None = None,
) -> None:
    """A calibration run folder: its resolved epochs, the data it read (format 2 unless
    `dataset`), a validation curve and maybe its test."""
    history = [
        {"epoch": epoch, "valid_bound": -100.0 + epoch / 10} for epoch in range(1, epochs + 1)
    ]
    history[-1]["valid_bound"] = -99.95  # the last epoch below the best one before it
    test = None if test_nll is None else evaluation_record(test_nll, (0.08, 0.09), 4.0, 10000, 5000)
    write_run(folder, status, history, 10, test)
    record = json.loads((folder / "metrics.json").read_text())
    record["dataset"] = dataset or FORMAT_2
    (folder / "metrics.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(f"seed: 0\ntrainer:\n  epochs: {planned}\n")


def calibration_cells(text: str, run: str) -> list[str]:
    """The cells of a run's row in the calibration table."""
    line = next(line for line in text.splitlines() if line.startswith(f"| `{run}`"))
    return [cell.strip() for cell in line.strip("|").split("|")]


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


def test_a_convergence_row_whose_runs_were_lost_says_where_they_got(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A row with no live run but snapshots of lost ones is queued and names the epochs they
    reached; the lost snapshots are not seeds of the row."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence-lost" / "runs"
    for number, epochs in ((1, 7), (2, 4)):
        curve = [{"epoch": e, "valid_bound": -110.0 + e} for e in range(1, epochs + 1)]
        write_run(runs / f"dlgm2_vgp_paper_lost{number}_s0", "running", curve, 10, None)
    assert study_runs.study_seeds("convergence-lost", "dlgm2_vgp_paper") == []
    lines = convergence_table("convergence-lost").splitlines()
    paper = next(line for line in lines if line.startswith("| DLGM 2hl + VGP, the paper's form"))
    where = "queued; earlier runs lost at epochs 7, 4 (progress.md)"
    assert [cell.strip() for cell in paper.strip("|").split("|")][2] == where


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


def per_example_file(
    folder: Path,
    name: str,
    nll: list[float],
    bound_nll: list[float] | None = None,
    samples: int = 5000,
) -> None:
    """A per-example file as vgp-eval writes it (log-likelihoods, bounds: 4 nats below the
    log-likelihoods unless given, as -bound)."""
    bound = np.asarray(nll) + 4.0 if bound_nll is None else np.asarray(bound_nll)
    with h5py.File(folder / name, "w") as handle:
        handle.create_dataset("log_likelihood", data=-np.asarray(nll))
        handle.create_dataset("bound", data=-bound)
        handle.attrs["is_samples"] = samples


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


def test_a_test_of_another_file_keeps_none_of_the_run_files_identity() -> None:
    """A format-2 run tested on a format-1 file (whose identity states no content digest):
    the test read the format-1 file, drawn as the run's settings say, and nothing of the run's
    own file's identity is taken for it."""
    run = {**FORMAT_2, "sha256": "a" * 64, "binarization": "dynamic", "eval_binarization_seed": 7}
    other = {"format_version": 1, "sha256": "b" * 64}
    assert data_read(run, other) == {
        **other,
        "binarization": "dynamic",
        "eval_binarization_seed": 7,
    }
    assert data_read(run, None) == run and data_read(None, None) == {}


def test_two_rows_of_one_seed_get_their_difference_paired_over_the_test_images(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """scripts/paired_differences.py pairs the tests of two rows of one seed on the same data,
    images and S whose files hold what their records say (not another seed's, nor a test of
    other data or another S, nor one whose file was not kept); the differences table shows the
    pair beside the unpaired difference, in the sign of the table's row either way round."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence" / "runs"
    history = [{"epoch": 1, "valid_bound": -90.0}]
    nll = {
        "dlgm1_vae_s0": [88.0, 90.0, 86.0, 87.0],
        "dlgm1_vae_s1": [88.5, 90.0, 86.0, 87.0],  # another seed: paired with nothing
        "dlgm1_vgp_default_s0": [87.5, 89.0, 85.9, 86.2],
        "dlgm1_vgp_linear_s0": [87.0, 89.0, 85.0, 86.0],
        "dlgm2_vae_s0": [90.0, 91.0, 92.0, 93.0],
        "dlgm2_vgp_paper_s0": [89.0, 90.0, 91.0, 92.0],  # tested on other data
        "dlgm2_vgp_paper_affine_s0": [89.5, 90.0, 91.0, 92.0],  # at another S
        "dlgm2_vgp_linear_s0": [89.0, 90.0, 91.0, 92.5],  # its file not kept
    }
    bound_nll = {  # the bounds' offsets differ by image and run
        run: [value + 3.0 + 0.1 * index * (image + 1) for image, value in enumerate(values)]
        for index, (run, values) in enumerate(nll.items())
    }
    for run, values in nll.items():
        samples = 1000 if run == "dlgm2_vgp_paper_affine_s0" else 5000
        test = evaluation_record(statistics.fmean(values), (0.8, 0.9), 0.0, 4, samples)
        test["bound_nll"] = statistics.fmean(bound_nll[run])
        if run != "dlgm2_vgp_linear_s0":
            test["per_example_file"] = f"test_per_example_k{samples}.h5"
        write_run(runs / run, "finished", history, 10, test)
        record = json.loads((runs / run / "metrics.json").read_text())
        other_data = {**FORMAT_2, "content_sha256": "0" * 64}
        record["dataset"] = other_data if run == "dlgm2_vgp_paper_s0" else FORMAT_2
        (runs / run / "metrics.json").write_text(json.dumps(record))
        name = f"test_per_example_k{samples}.h5"
        per_example_file(runs / run, name, values, bound_nll[run], samples)
    out = tmp_path / "convergence" / "paired_differences.json"
    assert paired_differences.main([str(runs), str(out)]) == 0
    pairs = {(p["first"], p["second"], p["seed"]): p for p in json.loads(out.read_text())}
    kept = ["dlgm1_vae", "dlgm1_vgp_default", "dlgm1_vgp_linear", "dlgm2_vae"]
    assert sorted(pairs) == [(a, b, 0) for i, a in enumerate(kept) for b in kept[i + 1 :]]
    # a renewed checkout: the run folders are gone and the pairs they gave stay as measured; so
    # do they where a folder holds the run's record but not its per-example file; a run trained
    # again (its record at another step, without that test) drops the stored pairs it is in
    # until they are measured anew
    measured, renewed = out.read_text(), tmp_path / "renewed"
    assert paired_differences.main([str(renewed), str(out)]) == 0
    assert out.read_text() == measured
    (renewed / "dlgm1_vae_s0").mkdir(parents=True)
    shutil.copy(runs / "dlgm1_vae_s0" / "metrics.json", renewed / "dlgm1_vae_s0")
    assert paired_differences.main([str(renewed), str(out)]) == 0
    assert out.read_text() == measured
    write_run(renewed / "dlgm1_vae_s0", "running", history * 2, 10, None)
    assert paired_differences.main([str(renewed), str(out)]) == 0
    left = [(p["first"], p["second"]) for p in json.loads(out.read_text())]
    kept_pairs = [(a, b) for i, a in enumerate(kept[1:], 1) for b in kept[i + 1 :]]
    assert left == kept_pairs
    # two runs back with their files: their pair measured, sorted among the kept ones (a run
    # back with its file keeps the pairs with runs still gone)
    shutil.copytree(runs / "dlgm1_vgp_linear_s0", renewed / "dlgm1_vgp_linear_s0")
    shutil.copytree(runs / "dlgm1_vae_s0", renewed / "dlgm1_vae_s0", dirs_exist_ok=True)
    assert paired_differences.main([str(renewed), str(out)]) == 0
    left = [(p["first"], p["second"]) for p in json.loads(out.read_text())]
    assert left == [("dlgm1_vae", "dlgm1_vgp_linear"), *kept_pairs]
    assert paired_differences.main([str(runs), str(out)]) == 0
    assert out.read_text() == measured  # all measured again, in the same order

    def paired(a: str, b: str, values: dict[str, list[float]]) -> tuple[float, float]:
        differences = [x - y for x, y in zip(values[a], values[b], strict=True)]
        return statistics.fmean(differences), statistics.stdev(differences) / 2

    pair = pairs[("dlgm1_vae", "dlgm1_vgp_default", 0)]
    for key, values in (("nll", nll), ("bound_nll", bound_nll)):
        difference, paired_se = paired("dlgm1_vae_s0", "dlgm1_vgp_default_s0", values)
        assert pair[key]["difference"] == pytest.approx(difference)
        assert pair[key]["paired_se"] == pytest.approx(paired_se)
    table = convergence_differences_table()

    def row_of(label: str) -> list[str]:
        line = next(line for line in table.splitlines() if line.startswith(f"| {label}"))
        return [cell.strip() for cell in line.strip("|").split("|")]

    for label, a, b in [
        ("dlgm1: VAE - the default VGP", "dlgm1_vae_s0", "dlgm1_vgp_default_s0"),
        ("dlgm1: control - the default VGP", "dlgm1_vgp_linear_s0", "dlgm1_vgp_default_s0"),
    ]:  # the second pair is stored the other way round (default before linear)
        difference, paired_se = paired(a, b, nll)
        unpaired = difference_cell(difference, math.hypot(0.8, 0.8))
        expected = "seed 0: " + difference_cell(difference, paired_se, digits=3)
        assert row_of(label)[1:4] == ["0", unpaired, expected]
    for label in ("dlgm2: VAE - the paper's VGP", "dlgm2: VAE - the twin"):
        assert row_of(label)[3] == f"seed 0: {NO_PAIR}"


def test_a_stored_pair_stands_while_its_runs_still_name_the_files_it_came_from(
    tmp_path: Path,
) -> None:
    """A pair measured earlier is kept where it cannot be measured again (a file gone, a run
    folder gone) while the same runs' records (their run_ids) still name its files as their
    current tests; a run trained again, or another realization of it tested into a file of the
    same name, drops it, and a pair whose files are all there is measured, not kept.
    scripts/paired_evaluations.py keeps a run's pairs by the same rule; both scripts pair no
    lost run's snapshot."""
    from vgp_bench.analysis.paired import stored_pair_stands

    history = [{"epoch": 1, "valid_bound": -90.0}]
    name = "test_per_example_k5000.h5"

    def tested(folder: Path, run_id: str, nll: float = 88.0) -> None:
        test = evaluation_record(nll, (0.8, 0.9), 4.0, 2, 5000)
        write_run(folder, "finished", history, 10, {**test, "per_example_file": name})
        record = json.loads((folder / "metrics.json").read_text())
        record = {**record, "run_id": run_id, "dataset": FORMAT_2}
        (folder / "metrics.json").write_text(json.dumps(record))

    first, second = tmp_path / "runs" / "a_s0", tmp_path / "runs" / "b_s0"
    tested(first, "a1")
    tested(second, "b1")
    sources = [(first, name, "a1"), (second, name, "b1")]
    assert stored_pair_stands(sources)  # both files gone
    assert stored_pair_stands([(first, name, None), (second, name, None)])  # no run_ids stored
    per_example_file(first, name, [87.0, 89.0])
    assert stored_pair_stands(sources)  # one file gone
    per_example_file(second, name, [87.0, 89.0])
    assert not stored_pair_stands(sources)  # both there: measured again
    shutil.rmtree(second)
    assert stored_pair_stands(sources)  # a folder gone with its checkout
    tested(first, "a2", 80.0)
    assert not stored_pair_stands(sources)  # another realization, a file of the same name
    write_run(first, "running", history * 2, 10, None)
    assert not stored_pair_stands([(first, name, None)])  # trained again: not its current test

    # the script: a stored pair whose other run's file is gone, and the first run tested again
    # as another realization into a file of the same name, is dropped, not kept stale
    study, out = tmp_path / "study", tmp_path / "paired_differences.json"
    tested(study / "a_s0", "a1")
    tested(study / "b_s0", "b1")
    tested(study / "b_lost1_s0", "b0")  # a lost run's snapshot: never paired
    per_example_file(study / "b_lost1_s0", name, [88.5, 87.5])
    per_example_file(study / "a_s0", name, [87.0, 89.0])
    per_example_file(study / "b_s0", name, [87.5, 88.5])
    main = paired_differences.main
    assert main([str(study), str(out)]) == 0
    (measured,) = json.loads(out.read_text())
    assert (measured["first"], measured["second"], measured["run_ids"]) == ("a", "b", ["a1", "b1"])
    (study / "b_s0" / name).unlink()
    assert main([str(study), str(out)]) == 0
    assert json.loads(out.read_text()) == [measured]  # kept as measured
    tested(study / "a_s0", "a2", 80.0)
    per_example_file(study / "a_s0", name, [79.0, 81.0])
    assert main([str(study), str(out)]) == 0
    assert json.loads(out.read_text()) == []

    own, other = "test_per_example_k5000.h5", "test_per_example_k5000_data-c0ffee00.h5"
    run = tmp_path / "calibration" / "burda_s0"
    write_run(run, "finished", history, 10, None)
    record = json.loads((run / "metrics.json").read_text())
    record["run_id"] = "r1"
    record["evaluations"] = [
        {**evaluation_record(88.0, (0.8, 0.9), 4.0, 2, 5000), "per_example_file": file,
         "run_steps": record["steps"]}
        for file in (own, other)
    ]  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(record))
    out = tmp_path / "paired_evaluations.json"
    stored = {"run": run.name, "own_file": own, "other_file": other, "n_examples": 2,
              "difference": 0.5, "paired_se": 0.1}  # fmt: skip
    out.write_text(json.dumps([stored]))
    main = paired_evaluations.main
    assert main([str(run.parent), str(out)]) == 0
    # its files are not in the folder: kept, with the run_id it was measured with
    assert json.loads(out.read_text()) == [{**stored, "run_id": "r1"}]
    write_run(run, "running", history * 2, 10, None)
    assert main([str(run.parent), str(out)]) == 0
    assert json.loads(out.read_text()) == []


def test_a_per_example_file_that_does_not_hold_its_records_values_is_not_read(
    tmp_path: Path,
) -> None:
    """A file replaced by another evaluation's values (another mean), a diverged run's
    non-finite values and a single image give no paired values."""
    from vgp_bench.analysis.paired import per_example_values
    from vgp_bench.run.metrics import Evaluation

    def evaluation(nll: float, images: int) -> Evaluation:
        record = evaluation_record(nll, (0.8, 0.9), 4.0, images, 5000)
        return Evaluation({**record, "per_example_file": "test.h5"})

    per_example_file(tmp_path, "test.h5", [88.0, 90.0])
    assert per_example_values(tmp_path, evaluation(89.0, 2)) == [88.0, 90.0]
    assert per_example_values(tmp_path, evaluation(89.0, 2), "bound_nll") == [92.0, 94.0]
    assert per_example_values(tmp_path, evaluation(89.5, 2)) is None  # another evaluation's
    per_example_file(tmp_path, "test.h5", [88.0, math.inf])
    assert per_example_values(tmp_path, evaluation(math.inf, 2)) is None
    per_example_file(tmp_path, "test.h5", [88.0])
    assert per_example_values(tmp_path, evaluation(88.0, 1)) is None


def draw_run(folder: Path, status: str, epochs: int, test: tuple[float, int, int] | None) -> None:
    """A DRAW run folder: a validation curve and maybe a test (IS, images, S)."""
    history = [{"epoch": e, "valid_bound": -120.0 + e} for e in range(1, epochs + 1)]
    evaluation = None
    if test is not None:
        nll, images, samples = test
        evaluation = evaluation_record(nll, (0.3, 0.4), 6.0, images, samples)
    write_run(folder, status, history, 500, evaluation)


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


def test_the_draw_protocol_quotes_the_script_defaults_and_the_model_config() -> None:
    """results/draw/README.md's epochs, S, first test images and architecture are those of
    scripts/study_draw.sh's defaults and configs/model/draw.yaml, and its batch the table1
    protocol's."""
    from omegaconf import OmegaConf

    text = (ROOT / "results" / "draw" / "README.md").read_text()
    script_text = (ROOT / "scripts" / "study_draw.sh").read_text()
    defaults = dict(re.findall(r"\$\{(EPOCHS|SAMPLES|TEST_IMAGES):-(\d+)\}", script_text))
    assert f"for {defaults['EPOCHS']} epochs" in text
    assert f"{defaults['EPOCHS']} epochs (`EPOCHS`)" in text
    assert f"S = {defaults['SAMPLES']} importance samples (`SAMPLES`)" in text
    assert f"first on the first {defaults['TEST_IMAGES']}" in text
    model = OmegaConf.load(ROOT / "configs" / "model" / "draw.yaml")
    assert (
        f"LSTMs of {model.encoder_size}, T = {model.steps} glimpses, "
        f"{model.read_size}x{model.read_size} read, {model.write_size}x{model.write_size} write, "
        f"z_t of {model.z_dim}"
    ) in text and model.encoder_size == model.decoder_size
    protocol = OmegaConf.load(ROOT / "configs" / "experiment" / "base" / "table1.yaml")
    assert f"batch {protocol.trainer.batch_size}" in text


def test_the_calibration_protocol_quotes_the_experiment_config() -> None:
    """results/calibration/README.md's hold-out, batch, steps an epoch, epochs and test samples
    are configs/experiment/burda_dlgm1_vae.yaml's (60,000 training images, 10,000 test)."""
    from omegaconf import OmegaConf

    from vgp_bench.schedules import total_stage_epochs

    text = section((ROOT / "results" / "calibration" / "README.md").read_text(), "## Protocol")
    config = OmegaConf.load(ROOT / "configs" / "experiment" / "burda_dlgm1_vae.yaml")
    holdout, batch = config.dataset.holdout, config.trainer.batch_size
    assert f"the last {holdout} held out" in text and f"`dataset.holdout={holdout}`" in text
    assert f"batch {batch}, the same order" in text and f"`trainer.batch_size={batch}`" in text
    assert f"({(60_000 - holdout) // batch} steps an epoch)" in text
    assert config.trainer.epochs == total_stage_epochs(8)
    assert f"`trainer.epochs={config.trainer.epochs}`" in text
    samples = config.eval.is_samples
    assert f"k = {samples} on all 10,000" in text and f"`eval.is_samples={samples}`" in text


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


def test_the_convergence_answer_waits_for_three_seeds_then_reads_the_differences(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The dlgm1 answer waits until every dlgm1 row has three tested seeds; then a difference
    beyond 3 standard errors over seeds is a yes in its direction, one within them is 'not
    measurably' with the range 3 SE leave open and the seeds a row would need at the measured
    difference and spread (SE falling as 1/sqrt(seeds)), and one more seed is costed from the
    rows' training hours."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence" / "runs"
    nll = {  # the VAE clearly behind; the control and the default VGP level
        "dlgm1_vae": [91.0, 91.1, 91.2],
        "dlgm1_vgp_default": [90.0, 90.3, 89.9],
        "dlgm1_vgp_linear": [90.1, 90.0, 90.2],
    }
    hours = {"dlgm1_vae": 0.25, "dlgm1_vgp_default": 1.0, "dlgm1_vgp_linear": 0.5}

    def add(name: str, seed: int) -> None:
        run_with_test(runs / f"{name}_s{seed}", nll[name][seed], hours[name])

    for name in nll:
        for seed in (0, 1):
            add(name, seed)
    add("dlgm1_vae", 2)
    waiting = convergence_answer()
    assert waiting.startswith("Waiting for 3 seeds") and waiting.endswith("so far: 0, 1).")
    add("dlgm1_vgp_default", 2)
    add("dlgm1_vgp_linear", 2)
    lines = convergence_answer().splitlines()
    assert len(lines) == 3
    diff, se, _ = row_difference("dlgm1_vae", "dlgm1_vgp_default", [0, 1, 2], "nll", "convergence")
    assert diff == pytest.approx(1.0333333) and diff > 3 * se
    assert "Yes: the default VGP beats the VAE, beyond 3 SE" in lines[0]
    assert difference_cell(diff, se) in lines[0] and "(per seed +1.00, +0.80, +1.30)" in lines[0]
    diff, se, _ = row_difference(
        "dlgm1_vgp_linear", "dlgm1_vgp_default", [0, 1, 2], "nll", "convergence"
    )
    assert "Not measurably" in lines[1] and abs(diff) < 3 * se
    low, high = signed(diff - 3 * se), signed(diff + 3 * se)
    assert f"anything from {low} to {high} nats" in lines[1]
    assert f"about {3 * (3 * se / diff) ** 2:.0f} seeds a row" in lines[1]
    assert "One more seed of the 3 dlgm1 rows costs 1.8 training hours" in lines[2]
    assert seeds_for_three_se(0.0, 0.1, 3) == math.inf


def test_the_dlgm2_answer_reads_one_seed_against_dlgm1s_spread_between_seeds(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """dlgm2 is answered from the seed all its rows share: each difference (with the test
    images' noise paired over them) is set against 3 standard errors from dlgm1's standard
    deviation between seeds of the same question, whose 95% interval from three seeds is given;
    a yes holds at the top of that interval or says how much wider a spread would undo it, and
    with no dlgm1 spread the answer says it cannot be read yet."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    history = [{"epoch": 1, "valid_bound": -90.0}]
    dlgm1 = {
        "dlgm1_vae": [91.0, 91.1, 91.2],
        "dlgm1_vgp_default": [90.0, 90.3, 89.9],  # VAE - default: +1.0, +0.8, +1.3
        "dlgm1_vgp_linear": [90.1, 90.0, 90.2],  # control - default: +0.1, -0.3, +0.3
    }

    def add(study: str, name: str, seed: int, nll: float | None) -> None:
        folder = tmp_path / study / "runs" / f"{name}_s{seed}"
        if nll is None:  # training: a folder, no test
            write_run(folder, "running", history, 10, None)
            return
        run_with_test(folder, nll, 2.0, "test_per_example_k5000.h5")

    files = ["test_per_example_k5000.h5"] * 2

    def pair(first: str, second: str, difference: float, se: float) -> dict[str, Any]:
        return {"seed": 1, "first": first, "second": second, "files": files,
                "nll": {"difference": difference, "paired_se": se}}  # fmt: skip

    # dlgm2's rows share seed 1; the VAE also has a seed 0, which the answer must not read
    cases = {
        "convergence": ((0, 1, 2), 95.0, 95.4),  # a yes inside dlgm1's interval; a no
        "robust": ((0, 1, 2), 93.0, 92.0),  # a yes beyond the interval; the twin ahead
        "one-dlgm1-seed": ((0,), 95.0, 95.4),
        "unpaired-twin": ((0, 1, 2), 95.0, 95.4),  # the paper form's per-example file lost
    }
    for study, (dlgm1_seeds, paper, twin) in cases.items():
        for name, values in dlgm1.items():
            for seed in dlgm1_seeds:
                add(study, name, seed, values[seed])
        add(study, "dlgm2_vae", 0, 80.0)
        add(study, "dlgm2_vae", 1, 99.5)
        add(study, "dlgm2_vgp_paper", 1, paper)
        paired = [  # the twin's pair stored the other way round: its sign turns
            pair("dlgm2_vae", "dlgm2_vgp_paper", 99.5 - paper, 0.05),
            pair("dlgm2_vgp_paper", "dlgm2_vgp_paper_affine", paper - twin, 0.03),
        ][: 1 if study == "unpaired-twin" else 2]
        (tmp_path / study / "paired_differences.json").write_text(json.dumps(paired))
    add("convergence", "dlgm2_vgp_paper_affine", 1, None)
    assert convergence_answer(family="dlgm2") == (
        "Waiting for 1 seed tested in every dlgm2 row (tested in all of them so far: none)."
    )
    for study, (_, _, twin) in cases.items():
        add(study, "dlgm2_vgp_paper_affine", 1, twin)
    study_runs.load.cache_clear()  # the twin's record changed under the module's cache
    low, high = deviation_interval(3)
    assert (low, high) == pytest.approx(  # two degrees of freedom: chi-square is exponential
        (math.sqrt(2 / (-2 * math.log(0.025))), math.sqrt(2 / (-2 * math.log(0.975))))
    )
    assert chi_square_quantile(0.975, 1) == pytest.approx(5.0239, abs=1e-4)
    assert chi_square_quantile(0.05, 10) == pytest.approx(3.9403, abs=1e-4)

    lines = convergence_answer(family="dlgm2").splitlines()
    assert len(lines) == 3
    spread = statistics.stdev([1.0, 0.8, 1.3])
    assert seed_spread("convergence", QUESTIONS, "dlgm1", "Is it the GP?")[0] == pytest.approx(
        statistics.stdev([0.1, -0.3, 0.3])
    )
    assert lines[0].startswith(
        "- **Does the VGP beat the VAE at convergence?** Yes if dlgm2's seeds spread like "
        "dlgm1's: the paper's VGP beats the VAE. VAE - the paper's VGP, test -log p(x) (IS), "
        "seed 1: +4.50 (paired over the test images, their noise only: seed 1: +4.50 ± 0.050)."
    )
    assert (
        f"a standard deviation of {spread:.2f} nats over its seeds 0, 1, 2 (95% interval "
        f"{low * spread:.2f} to {high * spread:.2f}, from 3 seeds); by it, this difference's "
        f"standard error is {spread:.2f} nats and the difference {4.5 / spread:.1f} of them."
    ) in lines[0]
    assert 4.5 / spread / 3 < high
    assert f"Seeds spreading {4.5 / spread / 3:.1f} times as widely" in lines[0]
    spread = statistics.stdev([0.1, -0.3, 0.3])
    assert lines[1].startswith("- **Is it the GP?** Not measurably with 1 seed: twin - ")
    assert "seed 1: +0.40 (paired over the test images, their noise only: seed 1: +0.40" in lines[1]
    assert (
        f"and the difference {0.4 / spread:.1f} of them, within 3 of zero: 3 leave open "
        f"anything from {signed(0.4 - 3 * spread)} to {signed(0.4 + 3 * spread)}"
    ) in lines[1]
    assert "One more seed of the 3 dlgm2 rows costs 6.0 training hours" in lines[2]

    robust = convergence_answer("robust", family="dlgm2").splitlines()
    assert 6.5 / statistics.stdev([1.0, 0.8, 1.3]) / 3 > high
    assert robust[0].startswith(
        "- **Does the VGP beat the VAE at convergence?** Yes: the paper's VGP beats the VAE, "
        "beyond 3 standard errors even if dlgm2's seeds spread as widely as the top of dlgm1's "
        "interval."
    )
    assert robust[1].startswith(
        "- **Is it the GP?** Yes if dlgm2's seeds spread like dlgm1's: the twin without the GP "
        "beats the paper's VGP."
    )
    assert (
        "seed 1: -1.00 (paired over the test images, their noise only: seed 1: -1.00" in (robust[1])
    )
    unanswered = convergence_answer("one-dlgm1-seed", family="dlgm2").splitlines()
    assert all(
        "Not answerable yet" in line
        and line.endswith(
            "not measured on dlgm2, and dlgm1's same difference has fewer than two seeds."
        )
        for line in unanswered[:2]
    )
    unpaired = convergence_answer("unpaired-twin", family="dlgm2").splitlines()
    paired_vae = "seed 1: +4.50 (paired over the test images, their noise only: seed 1: +4.50"
    assert paired_vae in unpaired[0]
    assert (
        "seed 1: +0.40 (not paired over the test images: no stored pair of per-example files)."
        in unpaired[1]
    )
    with pytest.raises(ValueError, match="asks no question"):
        answer_rows(QUESTIONS, "dlgm2", "Is it the kernel?")


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


def test_a_stored_pair_counts_only_for_the_runs_it_was_computed_from(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A pair in paired_differences.json is read for the two runs whose run_ids it stores, in
    either order (the sign turns), or for any runs where it stores none; a pair of an earlier
    realization, with the same per-example file names, is not read for the runs of now."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "study" / "runs"
    for name, run_id in (("a_s0", "id-a"), ("b_s0", "id-b")):
        run_with_test(runs / name, 90.0, 1.0, "test_per_example_k5000.h5")
        record = json.loads((runs / name / "metrics.json").read_text())
        (runs / name / "metrics.json").write_text(json.dumps({**record, "run_id": run_id}))
    tests = (study_runs.test_of("study", "a_s0"), study_runs.test_of("study", "b_s0"))

    def paired(first: str, second: str, run_ids: list[str] | None) -> tuple[float, float] | None:
        files = [tests[0]["per_example_file"]] * 2
        stored = {"seed": 0, "first": first, "second": second, "files": files,
                  "nll": {"difference": 0.4, "paired_se": 0.03}}  # fmt: skip
        if run_ids is not None:
            stored["run_ids"] = run_ids
        (tmp_path / "study" / "paired_differences.json").write_text(json.dumps([stored]))
        return paired_values("study", ("a", "b"), 0, tests, "nll")

    assert paired("a", "b", ["id-a", "id-b"]) == (0.4, 0.03)
    assert paired("b", "a", ["id-b", "id-a"]) == (-0.4, 0.03)
    assert paired("a", "b", None) == (0.4, 0.03)
    assert paired("a", "b", ["id-a", "id-b-of-an-earlier-machine"]) is None
    assert paired("b", "a", ["id-a", "id-b"]) is None  # stored the other way round: ids swap


def test_the_lead_at_the_stops_splits_into_equal_epochs_and_the_epochs_only_one_trained(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """lead_at_stops compares the best bounds so far at the last epoch of the run that stopped
    first (the other's last epoch before it where its history has a gap), and at the other's
    stop; the parts add up as shown; runs not both stopped by the early stopping, or stopped in
    the other order, are refused. realization_gap gives the range of two realizations' gaps in
    best bound after an epoch."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "study" / "runs"

    def add(name: str, values: dict[int, float], stop_reason: str | None) -> None:
        history = [{"epoch": epoch, "valid_bound": v} for epoch, v in values.items()]
        write_run(runs / name, "finished" if stop_reason else "running", history, 10, None)
        record = json.loads((runs / name / "metrics.json").read_text())
        (runs / name / "metrics.json").write_text(
            json.dumps({**record, "stop_reason": stop_reason})
        )

    # best so far: first -100, -99.5, -99.5 (stops at 3); second -100.5, -99, (no 3), -98.255
    add("first_s0", {1: -100.0, 2: -99.5, 3: -99.75}, "early_stopping")
    add("second_s0", {1: -100.5, 2: -99.0, 4: -98.255}, "early_stopping")
    add("running_s0", {1: -100.0, 2: -98.0, 3: -97.0, 4: -96.0}, None)
    names = ("the first", "the second")
    assert lead_at_stops("study", "first_s0", "second_s0", names) == (
        "at the first's last epoch, 3, the second's best validation bound was -99.00 against "
        "the first's -99.50 (+0.50 nats); the second trained 1 epoch more, to -98.25 at its "
        "stop (+1.25 against the first's best): of the second's best minus the first's at the "
        "stops, +0.50 nats were there at equal epochs and +0.75 came with the epochs only the "
        "second trained"
    )
    with pytest.raises(ValueError, match="did not stop after"):
        lead_at_stops("study", "second_s0", "first_s0", names)
    with pytest.raises(ValueError, match="not both stopped by early stopping"):
        lead_at_stops("study", "first_s0", "running_s0", names)
    # gaps of the best so far after epoch 1: epoch 2 1.5, epoch 3 2.5 (epoch 4 not in first)
    assert realization_gap("study", "first_s0", "running_s0", 1) == (
        "1.50 to 2.50 nats over epochs 2 to 3"
    )
    with pytest.raises(ValueError, match="share no epoch after 3"):
        realization_gap("study", "first_s0", "running_s0", 3)


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


def test_the_stop_sentence_says_how_much_each_stopped_curve_still_gained(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Over the tested runs the early stopping ended (not a run at its cap, not one still
    training), the generated sentence gives the range of the best bound's gain over the last
    `patience` epochs (the study script's default, 50) and how far before the last epoch the
    best came."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    study_runs.load.cache_clear()
    runs = tmp_path / "conv-s" / "runs"
    assert stop_gains("conv-s").startswith("No tested run has been stopped")

    def curve_run(run: str, status: str, bounds: list[float], stop: str | None) -> None:
        history = [{"epoch": e, "valid_bound": b} for e, b in enumerate(bounds, start=1)]
        test = evaluation_record(90.0, (0.25, 0.3), 5.0, 10000, 5000)
        write_run(runs / run, status, history, 10, test if status == "finished" else None)
        record = json.loads((runs / run / "metrics.json").read_text())
        (runs / run / "metrics.json").write_text(json.dumps({**record, "stop_reason": stop}))
        study_runs.load.cache_clear()

    # best -100.0 at epoch 10, then 0.3 more at epoch 57 of 60: 0.3 over the last 50
    vae = [-110.0 + e for e in range(1, 11)] + [-100.0] * 50
    vae[56] = -99.7
    curve_run("dlgm1_vae_s0", "finished", vae, "early_stopping")
    # best gained 0.45 over the last 50, at the very last epoch
    vgp = [-100.0] * 10 + [-100.0 + 0.009 * e for e in range(1, 51)]
    curve_run("dlgm1_vgp_default_s0", "finished", vgp, "early_stopping")
    curve_run("dlgm1_vgp_linear_s0", "finished", [-100.0 + e for e in range(60)], "epochs")
    curve_run("dlgm2_vae_s0", "running", [-100.0 + e for e in range(60)], None)
    sentence = stop_gains("conv-s")
    assert "of the 2 tested runs had gained from 0.300 to 0.450 nats" in sentence
    assert "over their last 50 epochs" in sentence and "at most 3 epochs before" in sentence
