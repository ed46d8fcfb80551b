"""The paper's rows, each against what this project has measured of it and under which protocol:
reproduced (within 0.5 nats under the row's own protocol), measured under another, or not run.
Drawn into the top-level README and results/reproduction/README.md."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.studies import runs
from vgp_bench.studies.cells import MISSING, estimate_text, plural, signed, table
from vgp_bench.studies.differences import seeds_estimate
from vgp_bench.studies.reproduction import readme_table
from vgp_bench.studies.study import Study

TOLERANCE = 0.5  # nats: a row's number measured under its own protocol within this is reproduced


@dataclass(frozen=True)
class Measure:
    """Runs of a study that measure a paper row: a run name without its seed (`_s<seed>` runs
    pooled) or one run's name, and the protocol they followed, in words."""

    study: str
    name: str
    protocol: str
    own: bool = False  # the row's own protocol, as its paper gives it


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's tables, its number, and what measures it here."""

    label: str
    paper: float | None  # nats; None: the row's number is not one of Table 1's
    measures: Sequence[Measure]


RUNNER = "the runner's Table 1 protocol (fixed binarization, RMSProp, batch 100)"
PAPER_FORM = "the paper's VGP form with the collapsed objective and global S"
TABLE1 = PAPER["table1"]
PAPER_ROWS = [
    PaperRow(
        TABLE1[("dlgm1", "vae")]["row"],
        TABLE1[("dlgm1", "vae")]["value"],
        [
            Measure("calibration", "burda_dlgm1_vae", "Burda et al.'s own (their code's)", True),
            Measure("convergence", "dlgm1_vae", f"{RUNNER}, to early stopping"),
        ],
    ),
    PaperRow(
        TABLE1[("dlgm1", "vgp")]["row"],
        TABLE1[("dlgm1", "vgp")]["value"],
        [
            Measure("calibrated", "burda_dlgm1_vgp", "the calibration's, the VGP default"),
            Measure("convergence", "dlgm1_vgp_default", f"{RUNNER}, the VGP default, to stop"),
            Measure("vgp_vs_vae", "dlgm1_vgp_paper", f"{RUNNER}, {PAPER_FORM}, format-1 data"),
        ],
    ),
    PaperRow(
        TABLE1[("dlgm2", "vgp")]["row"],
        TABLE1[("dlgm2", "vgp")]["value"],
        [Measure("convergence", "dlgm2_vgp_paper", f"{RUNNER}, {PAPER_FORM}, to stop")],
    ),
    PaperRow(
        TABLE1[("dlgm1", "planar_flow")]["row"],
        TABLE1[("dlgm1", "planar_flow")]["value"],
        [Measure("dlgm1_families", "fam_nf", RUNNER)],
    ),
    PaperRow(
        TABLE1[("dlgm1", "hvi")]["row"],
        TABLE1[("dlgm1", "hvi")]["value"],
        [Measure("dlgm1_families", "fam_hvi", RUNNER)],
    ),
    PaperRow(
        TABLE1[("dlgm2", "vae", "iwae")]["row"], TABLE1[("dlgm2", "vae", "iwae")]["value"], []
    ),
    PaperRow(
        TABLE1[("draw", "vae")]["row"],
        TABLE1[("draw", "vae")]["value"],
        [Measure("draw", "draw_vae", RUNNER)],
    ),
    PaperRow(
        TABLE1[("draw", "vgp")]["row"],
        TABLE1[("draw", "vgp")]["value"],
        [Measure("draw", "draw_vgp_default", f"{RUNNER}, the VGP default")],
    ),
    PaperRow("Table 2 (Sketch): DRAW and DRAW + VGP", None, []),
]


def tested_runs(measure: Measure) -> list[str]:
    """The measure's finished, tested runs: its seeds', or the one run of that name."""
    seeds = runs.tested_seeds(measure.study, measure.name)
    if seeds:
        return [f"{measure.name}_s{seed}" for seed in seeds]
    if runs.has_run(measure.study, measure.name) and runs.first_test(measure.study, measure.name):
        return [measure.name]
    return []


def training_words(measure: Measure, names: Sequence[str]) -> str:
    """How long the measure's runs trained, how many there are and how they were tested, from
    their records."""
    epochs = sorted({runs.load(measure.study, name)["epochs_completed"] for name in names})
    span = f"{epochs[0]}" if len(epochs) == 1 else f"{epochs[0]} to {epochs[-1]}"
    tests = {
        (int(test["is_samples"]), int(test["n_examples"]))
        for test in (runs.test_of(measure.study, name) for name in names)
    }
    tested = "; ".join(f"S = {samples} on {images:,} test images" for samples, images in tests)
    return f"{span} epochs, {plural(len(names), 'seed')}; {tested}"


def status(row: PaperRow, measure: Measure, nll: float) -> str:
    """Reproduced, not reproduced under the row's own protocol, or measured under another."""
    if row.paper is None:
        return "measured"
    off = nll - row.paper
    if measure.own:
        if abs(off) <= TOLERANCE:
            return f"**reproduced** ({signed(off)}, within {TOLERANCE} nats)"
        return f"not reproduced ({signed(off)} nats)"
    return f"another protocol ({signed(off)} nats)"


def measure_cells(row: PaperRow, measure: Measure) -> list[object]:
    """The cells of one measure of a row: its estimate, protocol, source and status."""
    source = f"[{measure.study}](results/{measure.study}/README.md)"
    names = tested_runs(measure)
    if not names:
        started = runs.study_seeds(measure.study, measure.name)
        state = "under way" if started else "not run yet"
        return [MISSING, measure.protocol, source, state]
    if names == [measure.name]:
        test = runs.test_of(measure.study, measure.name)
        nll, text = test["nll"], f"{test['nll']:.2f} ± {test['nll_stderr']:.2f}"
    else:
        seeds = [int(name.rsplit("_s", 1)[1]) for name in names]
        estimate = seeds_estimate(measure.study, measure.name, seeds, "nll")
        nll, text = estimate.mean, estimate_text(estimate)
    protocol = f"{measure.protocol}; {training_words(measure, names)}"
    return [text, protocol, source, status(row, measure, nll)]


def paper_rows_table() -> str:
    """Each paper row with its number and every measurement of it here, with its status."""
    rows = []
    for row in PAPER_ROWS:
        paper = MISSING if row.paper is None else f"{row.paper:.2f}"
        if not row.measures:
            rows.append([row.label, paper, MISSING, MISSING, MISSING, "not run"])
            continue
        for index, measure in enumerate(row.measures):
            first = [row.label, paper] if index == 0 else ["", ""]
            rows.append([*first, *measure_cells(row, measure)])
    header = [
        "paper row", "paper", "here: -log p(x) (IS)", "protocol, training", "study", "status",
    ]  # fmt: skip
    return table(header, rows)


def costs_table() -> str:
    """The README's costs of each row, from results/reproduction/costs.json."""
    costs = runs.RESULTS / "reproduction" / "costs.json"
    return readme_table(json.loads(costs.read_text()))


TOP_README = Study(
    "reproduction",
    tables={"paper-rows": paper_rows_table, "costs": costs_table},
    values={"paper-rows.tolerance": lambda: f"{TOLERANCE:g}"},
    readme="README.md",
)
