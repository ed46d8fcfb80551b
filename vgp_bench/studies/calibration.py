"""The calibration study (results/calibration): DLGM 1hl + VAE under Burda et al.'s protocol
against the paper's number for it, the anchor; the runs it lost, and the other data and
binarization the other runs read."""

from __future__ import annotations

import functools
from typing import Any

from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.analysis.report.runs import chosen_evaluation, is_lost_snapshot
from vgp_bench.studies import runs
from vgp_bench.studies.calibration_contrasts import Contrast, data_table, differences_table
from vgp_bench.studies.cells import MISSING, data_format, estimate_cell, signed, table
from vgp_bench.studies.curves import lost_runs_agreement as agreement
from vgp_bench.studies.curves import repeat_of
from vgp_bench.studies.study import Study

K = "calibration"
# the study's runs: name, what distinguishes it
CALIBRATION_RUNS = [
    ("burda_dlgm1_vae_s0", "the protocol (dynamic binarization)"),
    ("burda_dlgm1_vae_fixed_s0", "the protocol with the fixed binarization"),
    ("burda_dlgm1_vae_format1_s0", "the protocol on format-1 data, stopped when that was found"),
    ("burda_dlgm1_vae_lost1_s0", "the protocol, lost with its checkout (snapshot of 97e9d64)"),
    ("burda_dlgm1_vae_lost2_s0", "the protocol, lost with its checkout (snapshot of c23934f)"),
]
# runs of the protocol lost part-way, when the checkout they ran in was renewed between two
# sessions: their last committed snapshots, never tested (the name marks them, `_lost<N>_s<seed>`)
CALIBRATION_LOST = [run for run, _ in CALIBRATION_RUNS if is_lost_snapshot(run)]
PROTOCOL_RUN = CALIBRATION_RUNS[0][0]  # the run of the protocol the study is about
# each other run against the protocol run: label, the run, what their difference measures
CALIBRATION_CONTRASTS = [
    Contrast(
        "the fixed binarization - the protocol",
        "burda_dlgm1_vae_fixed_s0",
        "what training on one fixed binarization costs against binarizing afresh",
    ),
    Contrast(
        "format-1 data - the protocol",
        "burda_dlgm1_vae_format1_s0",
        "format 1's grey levels and the epochs the format-1 run did not train, together",
    ),
]
CALIBRATION_TOLERANCE = 0.5  # nats: the study's target is the anchor within this


def calibration_anchor() -> float:
    """The published number the study calibrates on: Table 1's DLGM + VAE (Burda et al.)."""
    return float(PAPER["table1"][("dlgm1", "vae")]["value"])


def calibration_verdict(difference_to_anchor: float, se: float) -> str:
    """Whether a test estimate is within the tolerance of the anchor, in words."""
    if abs(difference_to_anchor) <= CALIBRATION_TOLERANCE:
        return f"within {CALIBRATION_TOLERANCE} nats"
    side = "worse" if difference_to_anchor > 0 else "better"
    miss = abs(difference_to_anchor) - CALIBRATION_TOLERANCE
    return f"misses: {abs(difference_to_anchor):.2f} nats {side}, {miss:.2f} beyond (SE {se:.2f})"


def protocol_test(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The test a finished protocol run got at the end of training, or None."""
    if metrics.get("status") != "finished":
        return None
    return metrics.get("test")


def calibration_status(study: str = K) -> str:
    """Where the protocol run stands, in words, with its one test against the anchor."""
    run = PROTOCOL_RUN
    if not runs.has_run(study, run):
        return f"`{run}` not started"
    metrics = runs.load(study, run)
    planned = int(runs.run_setting(study, run, "trainer.epochs"))
    seed = int(runs.run_setting(study, run, "seed"))
    epochs = metrics["epochs_completed"]
    evaluation = protocol_test(metrics)
    if evaluation is None:
        return f"`{run}` (seed {seed}) {runs.where_it_is(metrics)} of {planned}"
    trained = (
        f"trained to the end ({epochs} epochs, seed {seed})"
        if epochs == planned
        else f"stopped at epoch {epochs} of {planned} (seed {seed})"
    )
    nll, nll_se = evaluation["nll"], evaluation["nll_stderr"]
    difference_to_anchor = nll - calibration_anchor()
    return (
        f"`{run}` {trained} and tested once: -log p(x) = "
        f"{estimate_cell(metrics, evaluation, 'nll')} (k = {evaluation['is_samples']}, "
        f"{evaluation['n_examples']:,} test images), {signed(difference_to_anchor)} nats from "
        f"the anchor: {calibration_verdict(difference_to_anchor, nll_se)}"
    )


def calibration_test(study: str = K) -> dict[str, Any]:
    """The protocol run's test at the end of training; a ValueError while it has none."""
    run = PROTOCOL_RUN
    evaluation = protocol_test(runs.load(study, run)) if runs.has_run(study, run) else None
    if evaluation is None:
        raise ValueError(f"{study}: `{run}` is not tested yet: nothing to quote from its test")
    return evaluation


def calibration_reading(study: str = K) -> dict[str, str]:
    """The numbers the README quotes from the protocol run's test, formatted."""
    evaluation = calibration_test(study)
    return {
        "se": f"{evaluation['nll_stderr']:.2f}",
        "images": f"{evaluation['n_examples']:,}",
        "samples": str(evaluation["is_samples"]),
        "khat_share": f"{100 * evaluation['pareto_k_above_0_7']:.0f}%",
        "bound_gap": f"{evaluation['bound_nll'] - evaluation['nll']:.2f}",
    }


def run_cells(study: str, run: str, what: str) -> list[object]:
    """A calibration run's first cells: its data, epochs and validation bounds."""
    metrics = runs.load(study, run)
    history = metrics["history"]
    planned = int(runs.run_setting(study, run, "trainer.epochs"))
    best = f"{runs.best_valid(study, run):.2f} ({runs.best_epoch(metrics)})"
    return [
        f"`{run}`",
        what,
        data_format(metrics["dataset"]),
        f"{metrics['epochs_completed']} of {planned}",
        f"{history[-1]['valid_bound']:.2f}" if history else MISSING,
        best if history else MISSING,
    ]


def test_cells(study: str, run: str, evaluation: dict[str, Any]) -> list[object]:
    """A tested calibration run's last cells: its test and its verdict against the anchor."""
    metrics, anchor = runs.load(study, run), calibration_anchor()
    nll, nll_se = evaluation["nll"], evaluation["nll_stderr"]
    planned = int(runs.run_setting(study, run, "trainer.epochs"))
    verdict = (
        calibration_verdict(nll - anchor, nll_se)
        if metrics.get("status") == "finished"
        else f"not the protocol: stopped at epoch {metrics['epochs_completed']} of {planned}"
    )
    return [
        evaluation["n_examples"],
        evaluation["is_samples"],
        estimate_cell(metrics, evaluation, "nll"),
        estimate_cell(metrics, evaluation, "bound_nll"),
        signed(nll - anchor),
        verdict,
    ]


def calibration_table(study: str = K) -> str:
    """Each calibration run: epochs, validation bounds, the test estimate against the anchor."""
    anchor = calibration_anchor()
    header = [
        "run", "", "data", "epochs", "last valid bound", "best valid bound (epoch)",
        "test images", "S", "-log p(x) (IS)", "-bound", f"IS - {anchor}",
        f"target: within {CALIBRATION_TOLERANCE}",
    ]  # fmt: skip
    rows = []
    for run, what in CALIBRATION_RUNS:
        if not runs.has_run(study, run):
            rows.append([f"`{run}`", what, MISSING, "not run", *[MISSING] * (len(header) - 4)])
            continue
        metrics = runs.load(study, run)
        cells = run_cells(study, run, what)
        dashes = [MISSING] * (len(header) - len(cells) - 1)
        evaluation = chosen_evaluation(metrics)
        if run in CALIBRATION_LOST:
            where = f"lost at epoch {metrics['epochs_completed']} or a little later, not tested"
            rows.append([*cells, where, *dashes])
        elif evaluation is None or metrics.get("status") not in ("finished", "interrupted"):
            rows.append([*cells, runs.where_it_is(metrics), *dashes])
        else:
            rows.append([*cells, *test_cells(study, run, evaluation)])
    return table(header, rows)


def lost_runs_agreement(after: int = 100, study: str = K) -> tuple[int, float, float]:
    """(epochs all lost protocol runs reached, largest gap of their best bounds so far after
    epoch `after`, largest gap of their bounds epoch by epoch)."""
    return agreement(study, CALIBRATION_LOST, after)


def calibration_data_table(study: str = K) -> str:
    """Each calibration run evaluated on its own data and on another data file."""
    return data_table(study, [run for run, _ in CALIBRATION_RUNS])


def calibration_differences_table(study: str = K) -> str:
    """Each other calibration run against the protocol run on the same test images and S."""
    return differences_table(study, PROTOCOL_RUN, CALIBRATION_CONTRASTS)


def reading(key: str) -> str:
    """One of the numbers the README quotes from the protocol run's test."""
    return calibration_reading()[key]


STUDY = Study(
    K,
    tables={
        "calibration": calibration_table,
        "calibration-data": calibration_data_table,
        "calibration-differences": calibration_differences_table,
    },
    values={
        "calibration.anchor": lambda: f"{calibration_anchor():.2f}",
        "calibration.tolerance": lambda: f"{CALIBRATION_TOLERANCE}",
        "calibration.lost.epochs": lambda: str(lost_runs_agreement()[0]),
        "calibration.lost.best_gap": lambda: f"{lost_runs_agreement()[1]:.2f}",
        "calibration.lost.epoch_gap": lambda: f"{lost_runs_agreement()[2]:.2f}",
        "calibration.status": calibration_status,
        **{
            f"calibration.test.{key}": functools.partial(reading, key)
            for key in ("se", "images", "samples", "khat_share", "bound_gap")
        },
        "calibration.repeat": lambda: repeat_of(K, PROTOCOL_RUN, CALIBRATION_LOST[-1]),
    },
)
