"""The DRAW study (results/draw): DRAW + VAE against DRAW + VGP at equal epochs on one CPU
thread, the paper's converged numbers beside them, and what the paper's form would cost."""

from __future__ import annotations

import json
import math
from typing import Any

from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.analysis.report.runs import chosen_evaluation
from vgp_bench.studies import runs
from vgp_bench.studies.cells import (
    MISSING,
    aux_gap_cell,
    difference_cell,
    estimate_cell,
    number,
    share_cell,
    table,
)
from vgp_bench.studies.differences import paired_cell, test_pairs_of
from vgp_bench.studies.draw_reading import reading
from vgp_bench.studies.draw_realizations import realization_spread, realizations_table
from vgp_bench.studies.q_reading import WARP_KEYS
from vgp_bench.studies.study import Study

D = "draw"
# the study's runs: label, run folder, the paper's Table 1 key
DRAW_RUNS = [
    ("DRAW + VAE", "draw_vae_s0", ("draw", "vae")),
    ("DRAW + VGP, the default", "draw_vgp_default_s0", ("draw", "vgp")),
    ("DRAW + VGP, the paper's form", "draw_vgp_paper_s0", ("draw", "vgp")),
]
DRAW_EPOCHS = (1, 2, 5)  # validation bounds shown besides the last epoch's


def draw_row(study: str, label: str, run: str, paper: str) -> list[object]:
    """A DRAW run's row: validation bounds by epoch and the test vgp-report uses."""
    metrics = runs.load(study, run)
    history = metrics["history"]
    cells: list[object] = [label, metrics["epochs_completed"]]
    for epoch in DRAW_EPOCHS:
        value = runs.valid_at(study, run, epoch)
        cells.append(MISSING if value is None else f"{value:.2f}")
    cells.append(f"{history[-1]['valid_bound']:.2f}" if history else MISSING)
    evaluation = chosen_evaluation(metrics) if metrics.get("status") == "finished" else None
    if evaluation is None:
        return [*cells, runs.where_it_is(metrics), MISSING, MISSING, MISSING, paper]
    return [
        *cells,
        evaluation["n_examples"],
        evaluation["is_samples"],
        estimate_cell(metrics, evaluation, "nll"),
        estimate_cell(metrics, evaluation, "bound_nll"),
        paper,
    ]


def draw_table(study: str = D) -> str:
    """Each DRAW run: validation bounds by epoch, the test evaluation vgp-report uses (all
    10,000 images once the test stage ran), the paper's converged GPU number beside it."""
    header = [
        "row", "epochs", *(f"valid bound, epoch {e}" for e in DRAW_EPOCHS), "last valid bound",
        "test images", "S", "-log p(x) (IS)", "-bound", "paper's Table 1 (≤, converged)",
    ]  # fmt: skip
    rows = []
    for label, run, key in DRAW_RUNS:
        paper = f"{PAPER['table1'][key]['value']:.2f}"
        if runs.has_run(study, run):
            rows.append(draw_row(study, label, run, paper))
            continue
        missing = "not run (PAPER=1)" if run == "draw_vgp_paper_s0" else "not run"
        rows.append([label, missing, *[MISSING] * (len(header) - 3), paper])
    return table(header, rows)


def vae_against(study: str, label: str, run: str) -> list[object]:
    """The VAE minus one VGP form at equal epochs on the same images and S, or why not."""
    vae_run = DRAW_RUNS[0][1]
    name = f"VAE - {label.removeprefix('DRAW + ')}"
    records = [runs.load(study, r) if runs.has_run(study, r) else {} for r in (vae_run, run)]
    if any(record.get("status") != "finished" for record in records):
        return [name, *[MISSING] * 4, "waiting for both rows"]
    if records[0]["epochs_completed"] != records[1]["epochs_completed"]:
        return [name, *[MISSING] * 4, "not comparable: other epochs"]
    pairs = test_pairs_of(*records)
    if not pairs:
        return [name, *[MISSING] * 4, "not comparable: no test on the same images and S"]
    vae, vgp = pairs[0]
    cells: list[object] = [name, records[0]["epochs_completed"]]
    for key in ("nll", "bound_nll"):
        se = math.hypot(vae[f"{key}_stderr"], vgp[f"{key}_stderr"])
        cells.append(difference_cell(vae[key] - vgp[key], se))
    seed = int(records[0].get("seed", 0))
    rows_of = (runs.row_and_seed(vae_run)[0], runs.row_and_seed(run)[0])
    cells.insert(3, paired_cell(study, rows_of, seed, (vae, vgp), "nll"))
    cells.append(f"{vae['n_examples']} images, S = {vae['is_samples']}")
    return cells


def draw_differences_table(study: str = D) -> str:
    """The VAE against each VGP form at equal epochs, on the same binary test images and
    S, the most precise evaluation both have: the standard error of both estimates over the
    test images (unpaired), and paired over the images where both per-example files were
    kept."""
    rows = [vae_against(study, label, run) for label, run, _ in DRAW_RUNS[1:]]
    header = ["", "epochs", "-log p(x) (IS)", "IS, paired over the test images", "-bound", "on"]
    return table(header, rows)


def draw_tested(study: str = D) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """The finished DRAW runs with a test: run -> (label, metrics, the evaluation shown)."""
    tested = {}
    for label, run, _ in DRAW_RUNS:
        metrics = runs.load(study, run) if runs.has_run(study, run) else {}
        evaluation = chosen_evaluation(metrics) if metrics.get("status") == "finished" else None
        if evaluation is not None:
            tested[run] = (label, metrics, evaluation)
    return tested


def draw_fit_table(study: str = D) -> str:
    """Each tested DRAW run: how far its bound lies below the IS estimate and how reliable that
    estimate is (PSIS k-hat, on the evaluation the draw table shows), what a better r could
    gain (VGP), and how q uses its flexibility at the last epoch (docs/design.md, 5.2)."""
    header = [
        "row", "test images", "S", "bound - IS", "k-hat > 0.7", "mean k-hat",
        "aux gap (images)", "warp share", "nonlinear share", "variance dispersion",
        "total correlation",
    ]  # fmt: skip
    rows = []
    for run, (label, metrics, evaluation) in draw_tested(study).items():
        cells: list[object] = [
            label,
            evaluation["n_examples"],
            evaluation["is_samples"],
            f"{evaluation['bound_nll'] - evaluation['nll']:.2f}",
            share_cell(evaluation.get("pareto_k_above_0_7")),
            number(evaluation.get("pareto_k_mean"), ".2f"),
            aux_gap_cell(metrics, evaluation),
        ]
        cells += [number(runs.last(study, run, key), ".2g") for key in WARP_KEYS]
        rows.append(cells)
    if not rows:
        return "No DRAW run is tested yet."
    return table(header, rows)


def draw_reading(study: str = D) -> str:
    """What the tested DRAW runs' diagnostics say of the VAE - VGP difference, in words."""
    tested = {run: evaluation for run, (_, _, evaluation) in draw_tested(study).items()}
    return reading(study, tested, DRAW_RUNS[1][1])


def draw_realizations_table(study: str = D) -> str:
    """The VAE's and the default VGP's realizations and their differences."""
    return realizations_table(study, [(label, run) for label, run, _ in DRAW_RUNS[:2]])


def draw_realization_spread(study: str = D) -> str:
    """How far the VAE's two realizations lie apart, against the VAE - VGP difference."""
    return realization_spread(study, "draw_vae", "draw_vgp_default")


def draw_paper_costs() -> dict[str, float]:
    """What the DRAW study's paper-form row would cost on one CPU thread, from the step and
    evaluation times results/reproduction/costs.json measured for `experiment=table1_draw_vgp`:
    seconds a training step, milliseconds an image and sample of the test, and the CPU-hours
    of the study's epochs (training and validation) and of its test on all test images."""
    costs = json.loads((runs.RESULTS / "reproduction" / "costs.json").read_text())
    (row,) = [r for r in costs["rows"].values() if r["command"].endswith("table1_draw_vgp")]
    timed = row["evaluation_timed"]
    image_sample_s = timed["seconds"] / (timed["images_timed"] * timed["samples"])
    epochs, samples = (
        int(runs.script_default("study_draw.sh", name)) for name in ("EPOCHS", "SAMPLES")
    )
    steps_per_epoch = row["steps"] / row["epochs"]
    training_h = epochs * (
        steps_per_epoch * row["step_ms"] / 3.6e6 + row["validation_cpu_hours"] / row["epochs"]
    )
    test_h = row["test_images"] * samples * image_sample_s / 3600
    return {
        "step_s": row["step_ms"] / 1000,
        "image_sample_ms": 1000 * image_sample_s,
        "training_h": training_h,
        "test_h": test_h,
    }


STUDY = Study(
    D,
    tables={
        "draw": draw_table,
        "draw-differences": draw_differences_table,
        "draw-fit": draw_fit_table,
        "draw-realizations": draw_realizations_table,
    },
    values={
        "draw.reading": draw_reading,
        "draw.realizations.vae": draw_realization_spread,
        "draw.paper.step_s": lambda: f"{draw_paper_costs()['step_s']:.1f}",
        "draw.paper.image_sample_ms": lambda: f"{draw_paper_costs()['image_sample_ms']:.0f}",
        "draw.paper.training_h": lambda: f"{draw_paper_costs()['training_h']:.0f}",
        "draw.paper.test_h": lambda: f"{draw_paper_costs()['test_h']:.0f}",
    },
)
