"""Regenerate the numbers of the results READMEs from the committed runs (no hand copies).

A README holds generated tables between `<!-- table:NAME -->` and `<!-- /table -->` and
generated numbers in its prose as `<!-- v:NAME -->1.80<!-- /v -->`; this script rewrites both
from `results/<study>/runs/*/metrics.json` and `results/local_gap/local_gap.json`.

    .venv/bin/python scripts/results_readme.py          # rewrite the READMEs
    .venv/bin/python scripts/results_readme.py --check  # exit 1 if one is out of date
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vgp_bench.analysis.markdown import markdown_table as table
from vgp_bench.analysis.paired import data_read, same_test_images
from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.analysis.report.runs import (
    RunRecord,
    chosen_evaluation,
    current_test_evaluations,
    is_lost_snapshot,
    tests_at_current_step,
)
from vgp_bench.analysis.standard_error import mean_and_standard_error as mean_se

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
READMES = ("vgp_vs_vae", "dlgm1_families", "convergence", "calibration", "draw")
TABLE = re.compile(r"(<!-- table:([\w.-]+) -->\n)(.*?)(<!-- /table -->)", re.S)
VALUE = re.compile(r"(<!-- v:([\w.-]+) -->)(.*?)(<!-- /v -->)", re.S)


@functools.cache
def load(study: str, run: str) -> dict[str, Any]:
    """A committed run's metrics.json, read once per process (callers only read it)."""
    return json.loads((RESULTS / study / "runs" / run / "metrics.json").read_text())


def test_of(study: str, run: str) -> dict[str, Any]:
    """The run's evaluation that vgp-report uses (the most precise one)."""
    evaluation = chosen_evaluation(load(study, run))
    if evaluation is None:
        raise ValueError(f"{study}/{run}: no test evaluation")
    return dict(evaluation)


def valid_at(study: str, run: str, epoch: int) -> float | None:
    """The validation bound after `epoch`, None if the run did not get there."""
    for entry in load(study, run)["history"]:
        if entry["epoch"] == epoch:
            return float(entry["valid_bound"])
    return None


def best_valid(study: str, run: str) -> float:
    """The best validation bound (the checkpoint tested)."""
    return max(float(entry["valid_bound"]) for entry in load(study, run)["history"])


def last(study: str, run: str, key: str) -> float | None:
    """A per-epoch statistic at the run's last epoch (None: no epoch, or not recorded)."""
    history = load(study, run)["history"]
    value = history[-1].get(key) if history else None
    return None if value is None else float(value)


def share_cell(share: float | None) -> str:
    """A share as a percentage, or — when there is none."""
    return "—" if share is None or not math.isfinite(share) else f"{100 * share:.1f}%"


def signed(value: float, digits: int = 2) -> str:
    """+1.23 / -1.23 (a minus zero shows as -0.00, as the reports print it)."""
    return f"{value:+.{digits}f}"


def plural(count: int, noun: str) -> str:
    """'1 epoch', '2 epochs'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def has_run(study: str, run: str) -> bool:
    """Whether a run's record is committed under results/<study>/runs."""
    return (RESULTS / study / "runs" / run / "metrics.json").exists()


def where_it_is(metrics: dict[str, Any]) -> str:
    """A run that has no test result yet, in words."""
    status = metrics.get("status")
    state = {"running": "training", "interrupted": "training", "finished": "finished, not tested"}
    return f"{state.get(status, status)}, epoch {metrics['epochs_completed']}"


def estimate_cell(metrics: dict[str, Any], evaluation: dict[str, Any], key: str) -> str:
    """IS or bound with its standard error, flagged when the runner judged the run diverged."""
    cell = f"{evaluation[key]:.2f} ± {evaluation[f'{key}_stderr']:.2f}"
    return f"{cell} (diverged)" if metrics.get("diverged") else cell


V = "vgp_vs_vae"
DLGM1 = {
    "VAE": "dlgm1_vae",
    "best VGP": "dlgm1_vgp_best",
    "control (no GP)": "dlgm1_vgp_linear",
    "the paper's configuration": "dlgm1_vgp_paper",
}
DLGM2 = {
    "VAE": "dlgm2_vae",
    "best VGP": "dlgm2_vgp_best",
    "control (no GP)": "dlgm2_vgp_linear",
}
# per-run rows of the test table: label, study run names (pooled over seeds when several)
TEST_ROWS = [
    ("DLGM 1hl + VAE", [f"dlgm1_vae_s{s}" for s in range(3)]),
    ("DLGM 1hl + VGP, best configuration", [f"dlgm1_vgp_best_s{s}" for s in range(3)]),
    ("DLGM 1hl + VGP without its GP (the control)", [f"dlgm1_vgp_linear_s{s}" for s in range(3)]),
    ("DLGM 1hl + VGP, the paper's configuration", [f"dlgm1_vgp_paper_s{s}" for s in range(3)]),
    ("DLGM 2hl + VAE, seed 0", ["dlgm2_vae_s0"]),
    ("DLGM 2hl + VAE, seed 1", ["dlgm2_vae_s1"]),
    ("DLGM 2hl + VGP, best configuration, seed 0", ["dlgm2_vgp_best_s0"]),
    ("DLGM 2hl + VGP, best configuration, seed 1", ["dlgm2_vgp_best_s1"]),
    ("DLGM 2hl + the control (r learned), seed 0", ["dlgm2_vgp_linear_s0"]),
    ("DLGM 2hl + the control (r learned), seed 1", ["dlgm2_vgp_linear_s1"]),
    (
        "DLGM 2hl + the control with r fixed (exact inverse), seed 0",
        ["dlgm2_vgp_linear_fixed_r_s0"],
    ),
    ("DLGM 2hl + VGP, the paper's configuration, seed 0", ["dlgm2_vgp_paper_s0"]),
]


def pooled(runs: Sequence[str], key: str) -> tuple[float, float]:
    """Mean and standard error of a test quantity over the runs (seeds)."""
    tests = [test_of(V, run) for run in runs]
    return mean_se([t[key] for t in tests], tests[0].get(f"{key}_stderr"))


def test_table() -> str:
    """The 100-epoch study's test results, a row per method (dlgm1) or per run (dlgm2)."""
    rows = []
    for label, runs in TEST_ROWS:
        nll, nll_se = pooled(runs, "nll")
        bound, bound_se = pooled(runs, "bound_nll")
        tests = [test_of(V, run) for run in runs]
        aux = [t["aux_gap"] for t in tests if "aux_gap" in t]
        seeds = ", ".join(str(load(V, run)["seed"]) for run in runs)
        khat = statistics.fmean(t["pareto_k_above_0_7"] for t in tests)
        rows.append(
            [
                label,
                seeds,
                f"{nll:.2f} ± {nll_se:.2f}",
                f"{bound:.2f} ± {bound_se:.2f}",
                f"{bound - nll:.2f}",
                f"{statistics.fmean(aux):.2f}" if aux else "—",
                share_cell(khat),
            ]
        )
    header = ["method", "seeds", "-log p(x) (IS)", "-bound", "bound - IS", "aux gap", "k-hat > 0.7"]
    return table(header, rows)


def difference(
    a: str, b: str, seeds: Sequence[int], key: str, study: str = V
) -> tuple[float, float, list[float]]:
    """Mean of run prefix `a` minus mean of `b` (positive: b is better), the unpaired standard
    error sqrt(se_a^2 + se_b^2) of the two means, and the per-seed differences."""
    a_values = [test_of(study, f"{a}_s{s}")[key] for s in seeds]
    b_values = [test_of(study, f"{b}_s{s}")[key] for s in seeds]
    a_mean, a_se = mean_se(a_values, test_of(study, f"{a}_s{seeds[0]}").get(f"{key}_stderr"))
    b_mean, b_se = mean_se(b_values, test_of(study, f"{b}_s{seeds[0]}").get(f"{key}_stderr"))
    per_seed = [x - y for x, y in zip(a_values, b_values)]
    return a_mean - b_mean, math.hypot(a_se, b_se), per_seed


def difference_cell(diff: float, se: float, digits: int = 2) -> str:
    """+0.23 ± 0.16 (1.4 SE); the standard error with `digits` decimals (no ratio where the
    standard error is zero or not a number)."""
    if not (se > 0 and math.isfinite(se)):
        return f"{signed(diff)} ± {se:.{digits}f}"
    ratio = abs(diff) / se
    return f"{signed(diff)} ± {se:.{digits}f} ({ratio:.{1 if ratio < 10 else 0}f} SE)"


PAIRS = [
    ("VAE - best VGP", "VAE", "best VGP"),
    ("VAE - control (no GP)", "VAE", "control (no GP)"),
    ("control - best VGP: what the GP adds", "control (no GP)", "best VGP"),
]


def differences_table(names: dict[str, str], seeds: Sequence[int], paper: bool) -> str:
    """Differences of the test means, unpaired standard errors, and the per-seed differences."""
    pairs = [*PAIRS, ("VAE - the paper's configuration", "VAE", "the paper's configuration")]
    rows = []
    for label, a, b in pairs if paper else PAIRS:
        cells: list[object] = [label]
        for key in ("nll", "bound_nll"):
            diff, se, per_seed = difference(names[a], names[b], seeds, key)
            cells.append(difference_cell(diff, se))
            cells.append(", ".join(signed(d) for d in per_seed))
        rows.append(cells)
    header = ["", "-log p(x) (IS)", "IS, per seed", "-bound", "bound, per seed"]
    return table(header, rows)


def dlgm2_paper_table() -> str:
    """The one-seed paper's configuration on dlgm2 against each seed-0 run (SE over images)."""
    rows = []
    for label, run in [
        ("VAE, seed 0", "dlgm2_vae_s0"),
        ("best VGP, seed 0", "dlgm2_vgp_best_s0"),
        ("control (r learned), seed 0", "dlgm2_vgp_linear_s0"),
    ]:
        cells: list[object] = [f"{label} - the paper's configuration"]
        for key in ("nll", "bound_nll"):
            a, b = test_of(V, run), test_of(V, "dlgm2_vgp_paper_s0")
            se = math.hypot(a[f"{key}_stderr"], b[f"{key}_stderr"])
            cells.append(difference_cell(a[key] - b[key], se))
        rows.append(cells)
    return table(["dlgm2", "-log p(x) (IS)", "-bound"], rows)


DLGM2_CURVES = [
    ("VAE, seed 0", "dlgm2_vae_s0"),
    ("control, r fixed (exact inverse), seed 0", "dlgm2_vgp_linear_fixed_r_s0"),
    ("control, r learned, seed 0", "dlgm2_vgp_linear_s0"),
    ("best VGP (r learned), seed 0", "dlgm2_vgp_best_s0"),
    ("VAE, seed 1", "dlgm2_vae_s1"),
    ("control, r learned, seed 1", "dlgm2_vgp_linear_s1"),
    ("best VGP (r learned), seed 1", "dlgm2_vgp_best_s1"),
    ("paper's configuration, seed 0", "dlgm2_vgp_paper_s0"),
]


def dlgm2_epochs_table() -> str:
    """dlgm2 validation bounds at a few epochs and the best."""
    epochs = [1, 3, 10, 30, 50, 70, 100]
    rows = [
        [label, *(f"{valid_at(V, run, e):.2f}" for e in epochs), f"{best_valid(V, run):.2f}"]
        for label, run in DLGM2_CURVES
    ]
    return table(["dlgm2 validation bound, epoch", *map(str, epochs), "best"], rows)


def vae_mean(epoch: int) -> float:
    """The dlgm1 VAE's validation bound at `epoch`, mean of seeds 0-2."""
    return statistics.fmean(valid_at(V, f"dlgm1_vae_s{s}", epoch) or math.nan for s in range(3))


def dlgm1_epochs_table() -> str:
    """dlgm1 validation bounds every 10 epochs, each run minus the VAE seeds' mean."""
    epochs = list(range(10, 101, 10))
    vae = [[valid_at(V, f"dlgm1_vae_s{s}", e) or math.nan for s in range(3)] for e in epochs]
    rows: list[list[object]] = [
        ["VAE, mean of seeds 0-2", *(f"{statistics.fmean(v):.2f}" for v in vae)],
        ["VAE, seed spread (max - min)", *(f"{max(v) - min(v):.2f}" for v in vae)],
    ]
    for label, prefix in [
        ("best VGP", "dlgm1_vgp_best"),
        ("control (no GP)", "dlgm1_vgp_linear"),
        ("paper's configuration", "dlgm1_vgp_paper"),
    ]:
        for seed in range(3):
            values = [
                (valid_at(V, f"{prefix}_s{seed}", e) or math.nan) - vae_mean(e) for e in epochs
            ]
            rows.append([f"{label}, seed {seed}, minus the VAE mean", *map(signed, values)])
    return table(["epoch", *map(str, epochs)], rows)


def best_valid_table() -> str:
    """The best validation bound of each dlgm1 run (the checkpoint tested)."""
    rows = [
        [label, *(f"{best_valid(V, f'{prefix}_s{s}'):.2f}" for s in range(3))]
        for label, prefix in DLGM1.items()
    ]
    return table(["dlgm1 best validation bound", "seed 0", "seed 1", "seed 2"], rows)


PILOTS = [
    ("VAE (reference: dlgm1_vae_s0, same seed and protocol)", "dlgm1_vae_s0"),
    ("free sigma, global T", "pilot_identity_global"),
    ("free sigma, shared_basis T", "pilot_identity_shared_basis"),
    ("free sigma, dense T (stopped after epoch 1: slowest)", "pilot_identity_dense"),
    ("**tied sigma = 0.1 s(h), global T** (chosen)", "pilot_tied_global"),
    ("tied sigma, shared_basis T (stopped after epoch 8)", "pilot_tied_shared_basis"),
    ("tied sigma, global T, K = 4 auxiliary samples", "pilot_tied_global_k4"),
]


def number(value: float | None, fmt: str) -> str:
    """A formatted number, or — when there is none."""
    return "—" if value is None or not math.isfinite(value) else format(value, fmt)


def pilots_table() -> str:
    """Validation bounds of the pilots after epochs 1, 2, 5, 8, 10, and their warp statistics."""
    epochs = [1, 2, 5, 8, 10]
    rows = []
    for label, run in PILOTS:
        stats = (
            [None, None]
            if run.startswith("dlgm1")
            else [
                last(V, run, "z/warp_share"),
                last(V, run, "z/nonlinear_warp_share"),
            ]
        )
        rows.append(
            [
                label,
                *(number(valid_at(V, run, e), ".2f") for e in epochs),
                number(stats[0], ".3g"),
                number(stats[1], ".2g"),
            ]
        )
    header = [
        "candidate",
        *(f"e{e}" for e in epochs),
        "warp share",
        "nonlinear share (as recorded)",
    ]
    return table(header, rows)


FIXED = [
    ("VAE (a fresh mean-field encoder)", "fixed_vae"),
    ("VGP, best configuration", "fixed_vgp_best"),
    ("VGP, best configuration with per-example outputs (shared_basis T)", "fixed_vgp_shared_basis"),
    ("control (no GP)", "fixed_vgp_linear"),
    ("VGP, the paper's form (dense T(h), zero mean)", "fixed_vgp_paper"),
]


def fixed_table() -> str:
    """Each family's q trained on the fixed decoder: validation, test, and the warp statistics."""
    study = "fixed_decoder"
    vae_bound = test_of(study, "fixed_vae")["bound_nll"]
    rows = []
    for label, run in FIXED:
        test = test_of(study, run)
        share = last(study, run, "z/warp_share")
        nonlinear = last(study, run, "z/nonlinear_warp_share")
        rows.append(
            [
                label,
                f"{best_valid(study, run):.2f}",
                f"{test['nll']:.2f}",
                f"{test['bound_nll']:.2f}",
                signed(test["bound_nll"] - vae_bound),
                "—" if share is None else f"{share:.3g} / {nonlinear:.2g}",
            ]
        )
    header = [
        "q on the fixed decoder",
        "best valid bound",
        "-log p(x) (IS)",
        "-bound",
        "-bound minus the VAE's",
        "warp share / nonlinear share (last epoch, as recorded)",
    ]
    return table(header, rows)


def local() -> dict[str, Any]:
    """results/local_gap/local_gap.json."""
    return json.loads((RESULTS / "local_gap" / "local_gap.json").read_text())


def local_gaps(family: str) -> list[float]:
    """Per image: log p(x) (each image's best IS estimate) minus the family's bound."""
    gaps = []
    for image in local()["per_image"]:
        best = max(image[f]["log_likelihood"] for f in local()["summary"])
        gaps.append(best - image[family]["bound"])
    return gaps


def local_table() -> str:
    """The per-image fits: mean and median gap, and against the mean-field fit."""
    names = [
        ("the VAE's encoder (amortized mean-field)", "amortized"),
        ("mean-field, fitted per image", "mean_field"),
        ("VGP (black-box form: m = 32, dense T), fitted per image", "vgp"),
        ("planar flow k = 16, fitted per image", "planar_flow"),
    ]
    summary = local()["summary"]
    field = summary["mean_field"]
    rows = []
    for label, family in names:
        s = summary[family]
        if family == "mean_field":
            versus = "—"
        else:
            diffs = [g - f for g, f in zip(local_gaps(family), local_gaps("mean_field"))]
            se = mean_se(diffs)[1]
            better = sum(d < 0 for d in diffs)
            versus = (
                f"{signed(s['gap'] - field['gap'])} ± {se:.2f} (better on {better} of {len(diffs)})"
            )
        rows.append(
            [label, f"{s['gap']:.2f} ± {s['gap_stderr']:.2f}", f"{s['gap_median']:.2f}", versus]
        )
    header = [
        f"q ({len(local()['per_image'])} test images)",
        "mean log p(x) - ELBO",
        "median (lower middle)",
        "minus the mean-field fit's",
    ]
    return table(header, rows)


F = "dlgm1_families"
FAMILIES = [
    ("VAE (`table1_dlgm1_vae`)", "fam_vae"),
    ("IWAE k = 50 (`trainer.objective=iwae trainer.n_samples=50`)", "fam_iwae"),
    ("planar flow k = 80 (`table1_dlgm1_nf`)", "fam_nf"),
    ("HVI, 8 leapfrog steps (`table1_dlgm1_hvi`)", "fam_hvi"),
    ("VGP, best configuration (`inference=vgp` defaults)", "fam_vgp_best"),
    ("VGP without its GP (`inference.warp=linear`, the control)", "fam_vgp_linear"),
    ("VGP, the paper's form (`table1_dlgm1_vgp`: dense T(h), zero mean)", "fam_vgp_paper"),
]


def families_table() -> str:
    """Every dlgm1 family after 10 epochs: test numbers and the wall-clock seconds recorded."""
    rows = []
    for label, run in FAMILIES:
        test, metrics = test_of(F, run), load(F, run)
        rows.append(
            [
                label,
                f"{test['nll']:.2f} ± {test['nll_stderr']:.2f}",
                f"{test['bound_nll']:.2f}",
                f"{test['bound_nll'] - test['nll']:.2f}",
                share_cell(test["pareto_k_above_0_7"]),
                f"{best_valid(F, run):.2f}",
                f"{metrics['wall_time_s']:.0f}",
            ]
        )
    header = [
        "family (config)",
        "-log p(x) (IS)",
        "-bound",
        "bound - IS",
        "k-hat > 0.7",
        "valid bound, epoch 10",
        "wall_time_s",
    ]
    return table(header, rows)


C = "convergence"
# the study's rows in training order: label, run name without its seed (seeds pooled)
CONVERGENCE_ROWS = [
    ("DLGM 2hl + VGP, the paper's form", "dlgm2_vgp_paper"),
    ("DLGM 2hl + the paper form's twin without the GP", "dlgm2_vgp_paper_affine"),
    ("DLGM 2hl + VAE", "dlgm2_vae"),
    ("DLGM 1hl + VAE", "dlgm1_vae"),
    ("DLGM 1hl + VGP, the default", "dlgm1_vgp_default"),
    ("DLGM 1hl + the default's control without the GP", "dlgm1_vgp_linear"),
]
CONVERGENCE_PAIRS = [
    ("dlgm2: VAE - the paper's VGP", "dlgm2_vae", "dlgm2_vgp_paper"),
    (
        "dlgm2: twin - the paper's VGP (what the GP adds)",
        "dlgm2_vgp_paper_affine",
        "dlgm2_vgp_paper",
    ),
    ("dlgm2: VAE - the twin", "dlgm2_vae", "dlgm2_vgp_paper_affine"),
    ("dlgm1: VAE - the default VGP", "dlgm1_vae", "dlgm1_vgp_default"),
    (
        "dlgm1: control - the default VGP (what the GP adds)",
        "dlgm1_vgp_linear",
        "dlgm1_vgp_default",
    ),
]
STOPS = {"early_stopping": "stopped", "epochs": "cap", "max_steps": "step cap"}


def stop_of(metrics: dict[str, Any]) -> str:
    """Why a finished run ended, in words (runs from before early stopping ran their epochs)."""
    reason = metrics.get("stop_reason") or "epochs"
    return STOPS.get(reason, reason)


def study_seeds(study: str, name: str) -> list[int]:
    """The seeds of a row with a committed run folder."""
    found = (
        re.fullmatch(rf"{re.escape(name)}_s(\d+)", path.name)
        for path in (RESULTS / study / "runs").glob(f"{name}_s*")
    )
    return sorted(int(match[1]) for match in found if match)


def tested_seeds(study: str, name: str) -> list[int]:
    """The seeds of a row whose run finished and was tested."""
    records = {seed: load(study, f"{name}_s{seed}") for seed in study_seeds(study, name)}
    return [
        seed
        for seed, record in records.items()
        if record.get("status") == "finished" and chosen_evaluation(record) is not None
    ]


def best_epoch(metrics: dict[str, Any]) -> int:
    """The epoch of the best validation bound (recorded by runs since early stopping came)."""
    if metrics.get("best_epoch"):
        return int(metrics["best_epoch"])
    return int(max(metrics["history"], key=lambda entry: entry["valid_bound"])["epoch"])


def at_best_epoch(study: str, run: str, key: str) -> float | None:
    """A per-epoch statistic at the best validation epoch (the checkpoint tested)."""
    metrics = load(study, run)
    for entry in metrics["history"]:
        if entry["epoch"] == best_epoch(metrics) and key in entry:
            return float(entry[key])
    return None


def mean_cell(values: Sequence[float | None], digits: int = 3) -> str:
    """The mean over seeds of a statistic, or a dash where a family has none."""
    present = [value for value in values if value is not None]
    return f"{statistics.fmean(present):.{digits}f}" if present else "—"


def training_hours(metrics: dict[str, Any]) -> float | None:
    """The hours a run spent in its training epochs (validation and tests not counted)."""
    seconds = metrics.get("wall_time_s")
    return seconds / 3600 if isinstance(seconds, int | float) and seconds > 0 else None


def lost_note(study: str, name: str) -> str:
    """Where the kept snapshots of a row's lost runs got to, in words ("" if it has none)."""
    lost = sorted(
        path.name
        for path in (RESULTS / study / "runs").glob(f"{name}_lost*")
        if re.fullmatch(rf"{re.escape(name)}_lost\d+_s\d+", path.name)
    )
    if not lost:
        return ""
    epochs = ", ".join(str(load(study, run)["epochs_completed"]) for run in lost)
    runs, at = ("an earlier run", "epoch") if len(lost) == 1 else ("earlier runs", "epochs")
    return f"; {runs} lost at {at} {epochs} (progress.md)"


def convergence_table(study: str = C) -> str:
    """Each row at its stop: epochs, best validation bound, test IS and bound, how q uses its
    flexibility at the tested epoch; a row still training says where it is."""
    header = [
        "row", "seeds", "epochs (why it ended)", "training hours", "best epoch",
        "best valid bound", "-log p(x) (IS)", "-bound", "warp share", "nonlinear share",
        "total correlation", "k-hat > 0.7",
    ]  # fmt: skip
    rows = []
    for label, name in CONVERGENCE_ROWS:
        seeds = tested_seeds(study, name)
        if not seeds:
            started = study_seeds(study, name)
            where = where_it_is(load(study, f"{name}_s{started[0]}")) if started else "queued"
            rows.append([label, "—", where + lost_note(study, name), *["—"] * (len(header) - 3)])
            continue
        runs = [f"{name}_s{seed}" for seed in seeds]
        metrics = [load(study, run) for run in runs]
        tests = [test_of(study, run) for run in runs]
        cells: list[object] = [
            label,
            ", ".join(map(str, seeds)),
            ", ".join(f"{m['epochs_completed']} ({stop_of(m)})" for m in metrics),
            ", ".join(number(training_hours(m), ".1f") for m in metrics),
            ", ".join(str(best_epoch(m)) for m in metrics),
            f"{statistics.fmean(best_valid(study, run) for run in runs):.2f}",
        ]
        for key in ("nll", "bound_nll"):
            mean, se = mean_se([t[key] for t in tests], tests[0].get(f"{key}_stderr"))
            cells.append(f"{mean:.2f} ± {se:.2f}")
        for key in ("z/warp_share", "z/nonlinear_warp_share", "z/total_correlation"):
            cells.append(mean_cell([at_best_epoch(study, run, key) for run in runs]))
        cells.append(mean_cell([t.get("pareto_k_above_0_7") for t in tests], 2))
        rows.append(cells)
    return table(header, rows)


NO_PAIR = "— (no stored pair of per-example files)"  # not kept, other data or images, or
# not computed while both files were there


def paired_values(
    study: str, rows: tuple[str, str], seed: int, tests: tuple[dict, dict], key: str
) -> tuple[float, float] | None:
    """Row a minus row b (`rows`) of one seed between the evaluations `tests` and its standard
    error paired over the test images, from scripts/paired_differences.py (None: no pair)."""
    path = RESULTS / study / "paired_differences.json"
    files = [test.get("per_example_file") for test in tests]
    runs = [f"{name}_s{seed}" for name in rows]
    run_ids = [load(study, run).get("run_id") if has_run(study, run) else None for run in runs]
    for pair in json.loads(path.read_text()) if path.is_file() else []:
        if pair["seed"] != seed or key not in pair:
            continue
        stored = pair.get("run_ids") or [None, None]
        if [pair["first"], pair["second"]] == list(rows) and pair["files"] == files:
            sign, theirs = 1.0, stored
        elif [pair["second"], pair["first"]] == list(rows) and pair["files"] == files[::-1]:
            sign, theirs = -1.0, stored[::-1]
        else:
            continue
        if any(None not in (a, b) and a != b for a, b in zip(theirs, run_ids, strict=True)):
            continue  # a pair of an earlier realization of these runs (the same file names)
        return sign * pair[key]["difference"], pair[key]["paired_se"]
    return None


def paired_cell(
    study: str,
    rows: tuple[str, str],
    seed: int,
    tests: tuple[dict, dict],
    key: str,
    show: Callable[[float, float], str] = lambda diff, se: difference_cell(diff, se, digits=3),
) -> str:
    """One seed's difference of `rows` with its standard error paired over the test images (the
    evaluations `tests` the table's unpaired difference uses), written by `show`."""
    paired = paired_values(study, rows, seed, tests, key)
    return NO_PAIR if paired is None else show(*paired)


def paired_cells(
    study: str, a: str, b: str, seeds: Sequence[int], **show: Callable[[float, float], str]
) -> str:
    """Each seed's IS difference a - b paired over the test images of its tests."""
    cells = (
        paired_cell(study, (a, b), seed, seed_tests(study, a, b, seed), "nll", **show)
        for seed in seeds
    )
    return "; ".join(f"seed {seed}: {cell}" for seed, cell in zip(seeds, cells, strict=True))


def seed_tests(study: str, a: str, b: str, seed: int) -> tuple[dict, dict]:
    """The test evaluations of rows a and b of one seed that their differences compare."""
    return test_of(study, f"{a}_s{seed}"), test_of(study, f"{b}_s{seed}")


def any_pair(study: str, a: str, b: str, seeds: Sequence[int]) -> bool:
    """Whether any of the seeds has its IS difference a - b paired over the test images."""
    return any(
        paired_values(study, (a, b), seed, seed_tests(study, a, b, seed), "nll") is not None
        for seed in seeds
    )


def test_image_noise(diff: float, se: float) -> str:
    """A difference with its standard error paired over the test images, without the ratio
    that would read as the strength of a result: the test images' noise alone."""
    return f"{signed(diff)} ± {se:.3f}"


def pair_label(a: str, b: str) -> str:
    """The words for the difference a - b of CONVERGENCE_PAIRS, without the model's name."""
    label = next(label for label, x, y in CONVERGENCE_PAIRS if (x, y) == (a, b))
    return label.split(": ", 1)[1]


def beyond_three_se(diff: float, se: float) -> bool:
    """Whether a difference lies 3 standard errors or more from zero: the study's test for a
    difference that needs no more seeds."""
    return abs(diff) >= 3 * se


def convergence_differences_table(study: str = C) -> str:
    """Differences of the test means over the seeds both rows have, and whether they call for
    more seeds (within 3 standard errors of zero); each seed's difference paired over the test
    images besides."""
    rows = []
    for label, a, b in CONVERGENCE_PAIRS:
        seeds = sorted(set(tested_seeds(study, a)) & set(tested_seeds(study, b)))
        if not seeds:
            rows.append([label, "—", "—", "—", "—", "waiting for both rows"])
            continue
        is_diff, is_se, _ = difference(a, b, seeds, "nll", study)
        bound_diff, bound_se, _ = difference(a, b, seeds, "bound_nll", study)
        if len(seeds) == 1:
            verdict = "one seed: its SE is the test images' only; more seeds"
        else:
            verdict = "beyond 3 SE" if beyond_three_se(is_diff, is_se) else "more seeds"
        rows.append(
            [
                label,
                ", ".join(map(str, seeds)),
                difference_cell(is_diff, is_se),
                paired_cells(study, a, b, seeds),
                difference_cell(bound_diff, bound_se),
                verdict,
            ]
        )
    header = [
        "", "seeds", "-log p(x) (IS)", "IS, paired over the test images", "-bound",
        "what the IS difference needs",
    ]  # fmt: skip
    return table(header, rows)


# the questions the study answers, each from one pair of rows (a - b, positive: b is better):
# question, a, b, what b beating a means, what a beating b means
CONVERGENCE_ANSWERS = {
    "dlgm1": [
        (
            "Does the VGP beat the VAE at convergence?",
            "dlgm1_vae",
            "dlgm1_vgp_default",
            "the default VGP beats the VAE",
            "the VAE beats the default VGP",
        ),
        (
            "Is it the GP?",
            "dlgm1_vgp_linear",
            "dlgm1_vgp_default",
            "the GP adds to its control",
            "the control without the GP beats the default VGP",
        ),
    ],
    "dlgm2": [
        (
            "Does the VGP beat the VAE at convergence?",
            "dlgm2_vae",
            "dlgm2_vgp_paper",
            "the paper's VGP beats the VAE",
            "the VAE beats the paper's VGP",
        ),
        (
            "Is it the GP?",
            "dlgm2_vgp_paper_affine",
            "dlgm2_vgp_paper",
            "the GP improves on its twin",
            "the twin without the GP beats the paper's VGP",
        ),
    ],
}
# the seeds every row of a model has before the README answers from them: dlgm1 three (a seed
# of its rows costs about 2 training hours); dlgm2 one, what the machine affords (its paper form
# and twin train for half a day of one core or more each)
ANSWER_SEEDS = {"dlgm1": 3, "dlgm2": 1}
# a model answered from fewer than SPREAD_SEEDS seeds borrows the spread between seeds of each
# question from this model, as a yardstick, and says so
YARDSTICK = {"dlgm2": "dlgm1"}
SPREAD_SEEDS = 3  # the fewest seeds whose own spread a model's answer is read against


def seeds_for_three_se(diff: float, se: float, seeds: int) -> float:
    """The seeds a row would need for the difference to lie 3 standard errors from zero, at
    the measured difference and spread between seeds (the standard error falls as
    1/sqrt(seeds))."""
    return math.inf if diff == 0 else seeds * (3 * se / diff) ** 2


def seed_cost_hours(study: str, names: Sequence[str]) -> float:
    """The training hours one more seed of each row costs: the mean over its tested seeds."""
    total = 0.0
    for name in names:
        hours = [
            training_hours(load(study, f"{name}_s{seed}")) for seed in tested_seeds(study, name)
        ]
        total += statistics.fmean(h for h in hours if h is not None)
    return total


def answer_rows(family: str, question: str) -> tuple[str, str]:
    """The two rows (a, b) whose difference a - b answers a model's question."""
    for asked, a, b, _, _ in CONVERGENCE_ANSWERS[family]:
        if asked == question:
            return a, b
    raise ValueError(f"the {family} answer asks no question {question!r}")


def answer_names(family: str) -> list[str]:
    """The rows a model's answer reads."""
    return sorted({name for _, a, b, _, _ in CONVERGENCE_ANSWERS[family] for name in (a, b)})


def answer_seeds(study: str, family: str) -> list[int]:
    """The seeds tested in every row of a model's answer."""
    names = answer_names(family)
    return sorted(set.intersection(*(set(tested_seeds(study, name)) for name in names)))


def chi_square_cdf(x: float, dof: int) -> float:
    """P(X <= x) for X chi-square with `dof` degrees of freedom: the regularised lower
    incomplete gamma function P(dof / 2, x / 2), by its power series."""
    if x <= 0:
        return 0.0
    shape, half = dof / 2, x / 2
    term = total = 1 / shape
    n = 0
    while term > 1e-16 * total:
        n += 1
        term *= half / (shape + n)
        total += term
    return min(1.0, math.exp(shape * math.log(half) - half - math.lgamma(shape)) * total)


def chi_square_quantile(probability: float, dof: int) -> float:
    """The x with P(X <= x) = `probability` for X chi-square with `dof` degrees of freedom."""
    low, high = 0.0, float(dof)
    while chi_square_cdf(high, dof) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if chi_square_cdf(middle, dof) < probability else (low, middle)
    return (low + high) / 2


def deviation_interval(seeds: int, level: float = 0.95) -> tuple[float, float]:
    """The `level` confidence interval of a normal standard deviation estimated from `seeds`
    values, as factors of the estimate: sqrt(dof / chi-square quantiles), dof = seeds - 1."""
    dof, tail = seeds - 1, (1 - level) / 2
    upper, lower = chi_square_quantile(1 - tail, dof), chi_square_quantile(tail, dof)
    return math.sqrt(dof / upper), math.sqrt(dof / lower)


def seed_spread(study: str, family: str, question: str) -> tuple[float, list[int]] | None:
    """The standard deviation between seeds of a question's IS difference on a model, over the
    seeds its answer reads, and those seeds (None with fewer than two)."""
    seeds = answer_seeds(study, family)
    if len(seeds) < 2:
        return None
    a, b = answer_rows(family, question)
    return statistics.stdev(difference(a, b, seeds, "nll", study)[2]), seeds


def yardstick_answer(
    study: str, family: str, question: str, verdicts: tuple[str, str], seeds: Sequence[int]
) -> str:
    """A question answered from fewer seeds than measure their own spread: the mean difference
    against 3 standard errors of the yardstick model's spread between seeds, with how far that
    spread is known."""
    a, b = answer_rows(family, question)
    diff = difference(a, b, seeds, "nll", study)[0]
    of_seeds = (
        f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {', '.join(map(str, seeds))}"
    )
    noise = (
        f"paired over the test images, their noise only: "
        f"{paired_cells(study, a, b, seeds, show=test_image_noise)}"
        if any_pair(study, a, b, seeds)
        else "not paired over the test images: no stored pair of per-example files"
    )
    measured = f"{pair_label(a, b)}, test -log p(x) (IS), {of_seeds}: {signed(diff)} ({noise})"
    other = YARDSTICK[family]
    spread = seed_spread(study, other, question)
    if spread is None or spread[0] == 0:
        missing = "has fewer than two seeds" if spread is None else "does not spread over its seeds"
        return (
            f"- **{question}** Not answerable yet: {measured}. The spread between seeds is not "
            f"measured on {family}, and {other}'s same difference {missing}."
        )
    deviation, other_seeds = spread
    se = deviation / math.sqrt(len(seeds))
    low, high = deviation_interval(len(other_seeds))
    ratio = abs(diff) / se
    yardstick = (
        f"The spread between seeds is not measured on {family}. {other}'s same difference has a "
        f"standard deviation of {deviation:.2f} nats over its seeds "
        f"{', '.join(map(str, other_seeds))} (95% interval {low * deviation:.2f} to "
        f"{high * deviation:.2f}, from {len(other_seeds)} seeds); by it, this difference's "
        f"standard error is {se:.2f} nats and the difference {ratio:.1f} of them"
    )
    if not beyond_three_se(diff, se):
        return (
            f"- **{question}** Not measurably with {len(seeds)} seed"
            f"{'s' if len(seeds) > 1 else ''}: {measured}. {yardstick}, within 3 of zero: "
            f"3 leave open anything from {signed(diff - 3 * se)} to {signed(diff + 3 * se)} "
            "nats."
        )
    verdict = verdicts[0] if diff > 0 else verdicts[1]
    if ratio / 3 >= high:
        return (
            f"- **{question}** Yes: {verdict}, beyond 3 standard errors even if {family}'s "
            f"seeds spread as widely as the top of {other}'s interval. {measured}. {yardstick}."
        )
    return (
        f"- **{question}** Yes if {family}'s seeds spread like {other}'s: {verdict}. "
        f"{measured}. {yardstick}. Seeds spreading {ratio / 3:.1f} times as widely as "
        f"{other}'s estimate, inside its interval, would bring it within 3 standard errors "
        "of zero."
    )


def convergence_answer(study: str = C, family: str = "dlgm1", min_seeds: int | None = None) -> str:
    """The answer to each question of a model's rows, in words from the differences over the
    seeds both rows have: the difference and its standard error over seeds, the range 3
    standard errors leave open, and the seeds a row would need where that range holds zero;
    from fewer seeds, against the yardstick model's spread between seeds."""
    min_seeds = ANSWER_SEEDS[family] if min_seeds is None else min_seeds
    pairs = CONVERGENCE_ANSWERS[family]
    common = answer_seeds(study, family)
    if len(common) < min_seeds:
        seeds = ", ".join(str(seed) for seed in common) or "none"
        return (
            f"Waiting for {min_seeds} seed{'s' if min_seeds > 1 else ''} tested in every "
            f"{family} row (tested in all of "
            f"them so far: {seeds})."
        )
    lines = []
    for question, a, b, b_better, a_better in pairs:
        if len(common) < SPREAD_SEEDS and family in YARDSTICK:
            verdicts = (b_better, a_better)
            lines.append(yardstick_answer(study, family, question, verdicts, common))
            continue
        diff, se, per_seed = difference(a, b, common, "nll", study)
        seeds = ", ".join(map(str, common))
        measured = (
            f"{pair_label(a, b)}, test -log p(x) (IS) over seeds {seeds}: "
            f"{difference_cell(diff, se)} (per seed {', '.join(signed(d) for d in per_seed)})"
        )
        if beyond_three_se(diff, se):
            verdict = b_better if diff > 0 else a_better
            lines.append(f"- **{question}** Yes: {verdict}, beyond 3 SE. {measured}.")
            continue
        needed = seeds_for_three_se(diff, se, len(common))
        need = (
            f"about {needed:.0f} seeds a row"
            if needed < 1000
            else "more than a thousand seeds a row"
        )
        lines.append(
            f"- **{question}** Not measurably: {measured}, within 3 SE of zero. 3 SE leave "
            f"open anything from {signed(diff - 3 * se)} to {signed(diff + 3 * se)} nats; at "
            f"this difference and spread between seeds, 3 SE would take {need}."
        )
    names = answer_names(family)
    cost = seed_cost_hours(study, names)
    lines.append(
        f"- One more seed of the {len(names)} {family} rows costs {cost:.1f} training hours on "
        "one core (the mean of the seeds tested), the validation and the tests on top."
    )
    return "\n".join(lines)


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
CALIBRATION_TOLERANCE = 0.5  # nats: the study's target is the anchor within this


def calibration_anchor() -> float:
    """The published number the study calibrates on: Table 1's DLGM + VAE (Burda et al.)."""
    return float(PAPER["table1"][("dlgm1", "vae")]["value"])


def run_setting(study: str, run: str, key: str) -> Any:
    """A setting of a committed run, as its config.yaml resolved it."""
    config = OmegaConf.load(RESULTS / study / "runs" / run / "config.yaml")
    return OmegaConf.select(config, key, throw_on_missing=True)


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
    if not has_run(study, run):
        return f"`{run}` not started"
    metrics = load(study, run)
    planned = int(run_setting(study, run, "trainer.epochs"))
    seed = int(run_setting(study, run, "seed"))
    epochs = metrics["epochs_completed"]
    evaluation = protocol_test(metrics)
    if evaluation is None:
        return f"`{run}` (seed {seed}) {where_it_is(metrics)} of {planned}"
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
    evaluation = protocol_test(load(study, run)) if has_run(study, run) else None
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
        if not has_run(study, run):
            rows.append([f"`{run}`", what, "—", "not run", *["—"] * (len(header) - 4)])
            continue
        metrics = load(study, run)
        history = metrics["history"]
        planned = int(run_setting(study, run, "trainer.epochs"))
        epochs = f"{metrics['epochs_completed']} of {planned}"
        cells: list[object] = [
            f"`{run}`",
            what,
            data_format(metrics["dataset"]),
            epochs,
            f"{history[-1]['valid_bound']:.2f}" if history else "—",
            f"{best_valid(study, run):.2f} ({best_epoch(metrics)})" if history else "—",
        ]
        finished = metrics.get("status") == "finished"
        evaluation = chosen_evaluation(metrics)
        if run in CALIBRATION_LOST:
            where = f"lost at epoch {metrics['epochs_completed']} or a little later, not tested"
            rows.append([*cells, where, *["—"] * (len(header) - len(cells) - 1)])
            continue
        if evaluation is None or not (finished or metrics.get("status") == "interrupted"):
            rows.append([*cells, where_it_is(metrics), *["—"] * (len(header) - len(cells) - 1)])
            continue
        nll, nll_se = evaluation["nll"], evaluation["nll_stderr"]
        verdict = (
            calibration_verdict(nll - anchor, nll_se)
            if finished
            else f"not the protocol: stopped at epoch {metrics['epochs_completed']} of {planned}"
        )
        rows.append(
            [
                *cells,
                evaluation["n_examples"],
                evaluation["is_samples"],
                estimate_cell(metrics, evaluation, "nll"),
                estimate_cell(metrics, evaluation, "bound_nll"),
                signed(nll - anchor),
                verdict,
            ]
        )
    return table(header, rows)


def best_so_far(study: str, run: str) -> dict[int, float]:
    """The best validation bound up to each epoch of a run."""
    best, curve = -math.inf, {}
    for entry in load(study, run)["history"]:
        best = max(best, float(entry["valid_bound"]))
        curve[int(entry["epoch"])] = best
    return curve


@functools.cache
def valid_curve(study: str, run: str) -> dict[int, float]:
    """A run's validation bound by epoch."""
    return {int(e["epoch"]): float(e["valid_bound"]) for e in load(study, run)["history"]}


def best_gaps(study: str, runs: Sequence[str], after: int) -> dict[int, float]:
    """The spread (max - min) of the runs' best validation bounds so far at each epoch after
    `after` that all of them have."""
    bests = [best_so_far(study, run) for run in runs]
    common = sorted(set.intersection(*(set(best) for best in bests)))
    return {e: max(b[e] for b in bests) - min(b[e] for b in bests) for e in common if e > after}


def lost_runs_agreement(after: int = 100, study: str = K) -> tuple[int, float, float]:
    """(epochs all lost protocol runs reached, largest gap of their best bounds so far after
    epoch `after`, largest gap of their bounds epoch by epoch)."""
    if len(CALIBRATION_LOST) < 2:
        raise ValueError(f"{study}: fewer than two lost runs to compare: {CALIBRATION_LOST}")
    curves = [valid_curve(study, run) for run in CALIBRATION_LOST]
    common = sorted(set.intersection(*(set(curve) for curve in curves)))
    if not common or common != list(range(1, common[-1] + 1)) or common[-1] <= after:
        raise ValueError(
            f"{study}: the lost runs {CALIBRATION_LOST} share no epochs 1..E with E > {after}"
        )
    best_gap = max(best_gaps(study, CALIBRATION_LOST, after).values())
    epoch_gap = max(max(c[e] for c in curves) - min(c[e] for c in curves) for e in common)
    return common[-1], best_gap, epoch_gap


def repeat_of(study: str, run: str, other: str) -> str:
    """How a run's validation curve compares with an earlier run's of the same protocol and
    seed over the epochs both have, in words: exactly, or within the largest gap."""
    curves = [valid_curve(study, name) for name in (run, other)]
    common = sorted(set(curves[0]) & set(curves[1]))
    if not common:
        return f"has no epoch in common with `{other}` yet"
    gap = max(abs(curves[0][e] - curves[1][e]) for e in common)
    if gap == 0:
        return (
            f"repeats `{other}`'s validation bound exactly, to the last digit, at each of the "
            f"{len(common)} epochs both have"
        )
    return (
        f"differs from `{other}`'s validation bound by at most {gap:.2f} nats over the "
        f"{len(common)} epochs both have"
    )


def lead_at_stops(study: str, run: str, other: str, names: tuple[str, str]) -> str:
    """`other`'s best validation bound minus `run`'s, both stopped by the early stopping and
    `run` at an earlier epoch: at `run`'s last epoch (equal epochs) and at `other`'s (the
    stops), the second part what came with the epochs only `other` trained. `names` say the
    two runs in words."""
    records = [load(study, name) for name in (run, other)]
    if any(r.get("stop_reason") != "early_stopping" for r in records):
        raise ValueError(f"{study}: {run} and {other} are not both stopped by early stopping")
    mine, theirs = best_so_far(study, run), best_so_far(study, other)
    stop, their_stop = max(mine), max(theirs)
    if their_stop <= stop:
        raise ValueError(f"{study}: {other} did not stop after {run} (epochs {their_stop}, {stop})")
    theirs_at_stop = theirs[max(epoch for epoch in theirs if epoch <= stop)]
    equal = round(theirs_at_stop - mine[stop], 2)  # rounded so that the parts add up as shown
    final = round(theirs[their_stop] - mine[stop], 2)
    return (
        f"at {names[0]}'s last epoch, {stop}, {names[1]}'s best validation bound was "
        f"{theirs_at_stop:.2f} against {names[0]}'s {mine[stop]:.2f} ({signed(equal)} nats); "
        f"{names[1]} trained {plural(their_stop - stop, 'epoch')} more, to "
        f"{theirs[their_stop]:.2f} at its stop ({signed(final)} against {names[0]}'s best): of "
        f"{names[1]}'s best minus {names[0]}'s at the stops, {signed(equal)} nats were there at "
        f"equal epochs and {signed(final - equal)} came with the epochs only {names[1]} trained"
    )


def realization_gap(study: str, run: str, other: str, after: int) -> str:
    """The range of the gaps between two realizations' best validation bounds so far over the
    epochs after `after` both have, in words."""
    gaps = best_gaps(study, (run, other), after)
    if not gaps:
        raise ValueError(f"{study}: {run} and {other} share no epoch after {after}")
    return (
        f"{min(gaps.values()):.2f} to {max(gaps.values()):.2f} nats over epochs {min(gaps)} to "
        f"{max(gaps)}"
    )


def data_format(dataset: dict[str, Any]) -> str:
    """The data file a run or an evaluation read, in words: its format and content digest."""
    digest = dataset.get("content_sha256")
    return f"format {dataset.get('format_version')}" + (f", {digest[:8]}" if digest else "")


def paired_se(study: str, run: str, own: dict[str, Any], other: dict[str, Any]) -> float | None:
    """The standard error of `other` - `own` paired over the test images, as
    scripts/paired_evaluations.py computed it from the two per-example files (None if not)."""
    path = RESULTS / study / "paired_evaluations.json"
    pairs = json.loads(path.read_text()) if path.is_file() else []
    files = (own.get("per_example_file"), other.get("per_example_file"))
    for pair in pairs:
        if (pair["run"], pair["own_file"], pair["other_file"]) == (run, *files):
            return float(pair["paired_se"])
    return None


def calibration_data_table(study: str = K) -> str:
    """Each calibration run evaluated on its own data and on another data file, the same
    parameters, test images and S: the difference, with its standard error paired over the
    test images where both per-example files were kept, from paired_evaluations.json (the
    evaluations share their seeds, so the pairing removes the images' own spread)."""
    header = [
        "run", "epoch", "test images", "S", "data it trained on", "-log p(x) there",
        "other data", "-log p(x) there", "other - own", "SE (paired)",
    ]  # fmt: skip
    rows = []
    for run, _ in CALIBRATION_RUNS:
        if not has_run(study, run):
            continue
        metrics = load(study, run)
        record = RunRecord(metrics)
        steps = record.steps
        owns = [evaluation.data for evaluation in current_test_evaluations(record)]
        others = [
            evaluation.data
            for evaluation in record.evaluations or []
            if evaluation.dataset is not None
            and not record.read_own_data(evaluation)
            and evaluation.run_steps == steps
            and (evaluation.split or "test") == "test"
        ]
        for other in others:
            size = (other["n_examples"], other["is_samples"])
            alike = [e for e in owns if (e["n_examples"], e["is_samples"]) == size]
            if not alike:
                continue
            with_se = [(e, paired_se(study, run, e, other)) for e in alike]
            own, se = next(((e, v) for e, v in with_se if v is not None), (alike[0], None))
            paired = "— (per-example files not kept)" if se is None else f"{se:.3f}"
            rows.append(
                [
                    f"`{run}`",
                    metrics["epochs_completed"],
                    own["n_examples"],
                    own["is_samples"],
                    data_format(metrics["dataset"]),
                    f"{own['nll']:.2f} ± {own['nll_stderr']:.2f}",
                    data_format(other["dataset"]),
                    f"{other['nll']:.2f} ± {other['nll_stderr']:.2f}",
                    signed(other["nll"] - own["nll"]),
                    paired,
                ]
            )
    if not rows:
        rows.append(["no run evaluated on other data yet", *["—"] * (len(header) - 1)])
    return table(header, rows)


# each run against the protocol run: label, the run, what their difference measures
CALIBRATION_CONTRASTS = [
    (
        "the fixed binarization - the protocol",
        "burda_dlgm1_vae_fixed_s0",
        "what training on one fixed binarization costs against binarizing afresh",
    ),
    (
        "format-1 data - the protocol",
        "burda_dlgm1_vae_format1_s0",
        "format 1's grey levels and the epochs the format-1 run did not train, together",
    ),
]


def test_pairs_of(
    first: dict[str, Any], second: dict[str, Any], same_draw: bool = True
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Two runs' tests at their current steps (any data) that read the same binary test
    images with the same S (with `same_draw=False`, the same grey images, binarized apart):
    the most precise first (most images, then most samples), and of two alike the one whose
    per-example files were both kept."""
    records = [RunRecord(first), RunRecord(second)]
    tests = [tests_at_current_step(record) for record in records]
    pairs = [
        (a, b)
        for a in tests[0]
        for b in tests[1]
        if same_test_images((records[0], a), (records[1], b), same_draw)
    ]
    pairs.sort(
        key=lambda pair: (
            pair[0].n_examples,
            pair[0].is_samples,
            bool(pair[0].per_example_file and pair[1].per_example_file),
        ),
        reverse=True,
    )
    return [(a.data, b.data) for a, b in pairs]


def draw_of(data: dict[str, Any]) -> str:
    """The binary draw of the test images a test read, in words."""
    if data.get("binarization") == "dynamic":
        return f"drawn once with seed {data.get('eval_binarization_seed')}"
    return "the file's own draw"


def calibration_differences_table(study: str = K) -> str:
    """Each other calibration run against the protocol run on the same test images and S (the
    other run's parameters tested on the protocol's data count): the difference of the
    estimates with their unpaired standard error, and paired over the images where the tests
    read the same binary draw and both per-example files were kept
    (scripts/paired_differences.py); where no two tests read the same draw, tests of the same
    grey images binarized apart (the fixed-binarization twin), unpaired only."""
    protocol = PROTOCOL_RUN
    header = [
        "", "epochs", "test images (data, binary draw)", "images", "S", "-log p(x): the run",
        "the protocol", "difference (IS)", "IS, paired over the test images",
        "what it measures",
    ]  # fmt: skip
    rows = []
    for label, run, measures in CALIBRATION_CONTRASTS:
        missing = [name for name in (run, protocol) if not has_run(study, name)]
        if missing:
            why = " and ".join(f"`{name}`" for name in missing) + " not run"
            rows.append([label, *["—"] * (len(header) - 3), why, measures])
            continue
        untested = [
            name for name in (run, protocol)
            if chosen_evaluation(load(study, name)) is None
            or load(study, name).get("status") not in ("finished", "interrupted")
        ]  # fmt: skip
        if untested:
            why = "waiting for the test of " + " and ".join(f"`{name}`" for name in untested)
            rows.append([label, *["—"] * (len(header) - 3), why, measures])
            continue
        metrics = (load(study, run), load(study, protocol))
        pairs = test_pairs_of(*metrics) or test_pairs_of(*metrics, same_draw=False)
        if not pairs:
            why = "not comparable: no tests of the same test images and S"
            rows.append([label, *["—"] * (len(header) - 3), why, measures])
            continue
        tests = pairs[0]
        read = [
            data_read(m.get("dataset"), t.get("dataset"))
            for m, t in zip(metrics, tests, strict=True)
        ]
        draws = [draw_of(data) for data in read]
        data = data_format(read[1])
        seed = int(run.rsplit("_s", 1)[1])
        rows_of = (run.rsplit("_s", 1)[0], protocol.rsplit("_s", 1)[0])
        se = math.hypot(tests[0]["nll_stderr"], tests[1]["nll_stderr"])
        rows.append(
            [
                label,
                ", ".join(str(m["epochs_completed"]) for m in metrics),
                f"{data}, {draws[1]}" if draws[0] == draws[1] else f"{data}: {' / '.join(draws)}",
                tests[0]["n_examples"],
                tests[0]["is_samples"],
                f"{tests[0]['nll']:.2f} ± {tests[0]['nll_stderr']:.2f}",
                f"{tests[1]['nll']:.2f} ± {tests[1]['nll_stderr']:.2f}",
                difference_cell(tests[0]["nll"] - tests[1]["nll"], se),
                paired_cell(study, rows_of, seed, tests, "nll")
                if draws[0] == draws[1]
                else "— (other binary draws of the test images)",
                measures,
            ]
        )
    return table(header, rows)


D = "draw"
# the study's runs: label, run folder, the paper's Table 1 key
DRAW_RUNS = [
    ("DRAW + VAE", "draw_vae_s0", ("draw", "vae")),
    ("DRAW + VGP, the default", "draw_vgp_default_s0", ("draw", "vgp")),
    ("DRAW + VGP, the paper's form", "draw_vgp_paper_s0", ("draw", "vgp")),
]
DRAW_EPOCHS = (1, 2, 5)  # validation bounds shown besides the last epoch's


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
        if not has_run(study, run):
            missing = "not run (PAPER=1)" if run == "draw_vgp_paper_s0" else "not run"
            rows.append([label, missing, *["—"] * (len(header) - 3), paper])
            continue
        metrics = load(study, run)
        history = metrics["history"]
        cells: list[object] = [label, metrics["epochs_completed"]]
        for epoch in DRAW_EPOCHS:
            value = valid_at(study, run, epoch)
            cells.append("—" if value is None else f"{value:.2f}")
        cells.append(f"{history[-1]['valid_bound']:.2f}" if history else "—")
        evaluation = chosen_evaluation(metrics) if metrics.get("status") == "finished" else None
        if evaluation is None:
            rows.append([*cells, where_it_is(metrics), "—", "—", "—", paper])
            continue
        rows.append(
            [
                *cells,
                evaluation["n_examples"],
                evaluation["is_samples"],
                estimate_cell(metrics, evaluation, "nll"),
                estimate_cell(metrics, evaluation, "bound_nll"),
                paper,
            ]
        )
    return table(header, rows)


def draw_differences_table(study: str = D) -> str:
    """The VAE against each VGP form at equal epochs, on the same binary test images and
    S, the most precise evaluation both have: the standard error of both estimates over the
    test images (unpaired), and paired over the images where both per-example files were
    kept."""
    rows = []
    vae_run = DRAW_RUNS[0][1]
    for label, run, _ in DRAW_RUNS[1:]:
        name = f"VAE - {label.removeprefix('DRAW + ')}"
        records = [load(study, r) if has_run(study, r) else {} for r in (vae_run, run)]
        if any(record.get("status") != "finished" for record in records):
            rows.append([name, "—", "—", "—", "—", "waiting for both rows"])
            continue
        if records[0]["epochs_completed"] != records[1]["epochs_completed"]:
            rows.append([name, "—", "—", "—", "—", "not comparable: other epochs"])
            continue
        pairs = test_pairs_of(*records)
        if not pairs:
            why = "not comparable: no test on the same images and S"
            rows.append([name, "—", "—", "—", "—", why])
            continue
        vae, vgp = pairs[0]
        cells: list[object] = [name, records[0]["epochs_completed"]]
        for key in ("nll", "bound_nll"):
            se = math.hypot(vae[f"{key}_stderr"], vgp[f"{key}_stderr"])
            cells.append(difference_cell(vae[key] - vgp[key], se))
        seed = int(records[0].get("seed", 0))
        rows_of = (vae_run.rsplit("_s", 1)[0], run.rsplit("_s", 1)[0])
        cells.insert(3, paired_cell(study, rows_of, seed, (vae, vgp), "nll"))
        cells.append(f"{vae['n_examples']} images, S = {vae['is_samples']}")
        rows.append(cells)
    header = ["", "epochs", "-log p(x) (IS)", "IS, paired over the test images", "-bound", "on"]
    return table(header, rows)


# each family's two realizations of seed 0: the first machine's runs, tested on the first 1000
# test images before that machine was replaced with their folders (snapshots of commit 7970b27
# renamed `_lost1`), and this machine's, whose floats differ from the first step on
REALIZATIONS = (("the first machine's (lost)", "_lost1_s0"), ("this machine's", "_s0"))


def realizations(study: str = D) -> list[tuple[str, str]]:
    """Every pair of DRAW runs of one realization, as (label, run-name suffix): seed 0's two
    realizations, then this machine's further seeds (SEEDS in scripts/study_draw.sh)."""
    seeds = {
        int(match[1])
        for path in (RESULTS / study / "runs").glob("draw_*")
        if (match := re.fullmatch(r"draw_(?:vae|vgp_default)_s(\d+)", path.name))
    }
    further = [(f"this machine's, seed {seed}", f"_s{seed}") for seed in sorted(seeds - {0})]
    return [*REALIZATIONS, *further]


def row_and_seed(run: str) -> tuple[str, int]:
    """A run's row and seed: draw_vae_lost1_s0 -> (draw_vae_lost1, 0)."""
    row, seed = run.rsplit("_s", 1)
    return row, int(seed)


def first_test(study: str, run: str) -> dict[str, Any] | None:
    """A finished run's end-of-training test (on the first test images), else None."""
    metrics = load(study, run) if has_run(study, run) else {}
    return metrics.get("test") if metrics.get("status") == "finished" else None


def draw_realizations_table(study: str = D) -> str:
    """Each family's realizations (seed 0 on two machines, then further seeds) at their
    end-of-training tests (the same first test images and S); the differences between seed 0's
    realizations, each pair's VAE - VGP, and their mean with its standard error over the pairs
    (the spread between realizations, which no standard error over the test images holds)."""
    header = ["", "epochs", "last valid bound", "test images", "S", "-log p(x) (IS)", "-bound"]
    pairs = realizations(study)
    rows: list[list[object]] = []
    for label, run, _ in DRAW_RUNS[:2]:
        for machine, suffix in pairs:
            name = run.removesuffix("_s0") + suffix
            metrics = load(study, name) if has_run(study, name) else {}
            test = first_test(study, name)
            cells: list[object] = [f"{label}, {machine}"]
            if not metrics:
                rows.append([*cells, "not run", *["—"] * (len(header) - 2)])
                continue
            history = metrics["history"]
            last_bound = f"{history[-1]['valid_bound']:.2f}" if history else "—"
            cells += [metrics["epochs_completed"], last_bound]
            if test is None:
                rows.append([*cells, where_it_is(metrics), "—", "—", "—"])
                continue
            cells += [test["n_examples"], test["is_samples"]]
            cells += [estimate_cell(metrics, test, key) for key in ("nll", "bound_nll")]
            rows.append(cells)
    # (label, the two runs, whether it is a pair's VAE - VGP, which the mean row pools)
    differences = [
        (f"{label}: the first machine's - this machine's", [
            run.removesuffix("_s0") + suffix for _, suffix in REALIZATIONS
        ], False)
        for label, run, _ in DRAW_RUNS[:2]
    ] + [
        (f"VAE - VGP, {machine}", [
            run.removesuffix("_s0") + suffix for _, run, _ in DRAW_RUNS[:2]
        ], True)
        for machine, suffix in pairs
    ]  # fmt: skip
    difference_rows: list[list[object]] = []
    leads: dict[str, list[float]] = {"nll": [], "bound_nll": []}
    for name, runs, pooled in differences:
        tests = [first_test(study, run) for run in runs]
        if tests[0] is None or tests[1] is None:
            difference_rows.append([name, "waiting for both runs", "—", "—"])
            continue
        cells = [name]
        for key in ("nll", "bound_nll"):
            diff = tests[0][key] - tests[1][key]
            se = math.hypot(tests[0][f"{key}_stderr"], tests[1][f"{key}_stderr"])
            cells.append(difference_cell(diff, se))
            if pooled:
                leads[key].append(diff)
        (row_a, seed), (row_b, _) = row_and_seed(runs[0]), row_and_seed(runs[1])
        cells.insert(2, paired_cell(study, (row_a, row_b), seed, (tests[0], tests[1]), "nll"))
        difference_rows.append(cells)
    if len(leads["nll"]) >= 2:
        count = len(leads["nll"])
        label = f"VAE - VGP, the mean over the {count} pairs (standard error over the pairs)"
        means = [difference_cell(*mean_se(leads[key])) for key in ("nll", "bound_nll")]
        difference_rows.append([label, means[0], "—", means[1]])
    header_differences = ["", "-log p(x) (IS)", "IS, paired over the test images", "-bound"]
    return table(header, rows) + "\n" + table(header_differences, difference_rows)


def draw_realization_spread(study: str = D) -> str:
    """How far the two realizations of DRAW + VAE lie apart on their first test images, against
    the VAE - VGP difference of the first machine's runs, in words; once this machine's pair is
    tested too, the VGP's spread and whether the difference keeps its sign."""
    vae = [first_test(study, f"draw_vae{suffix}") for _, suffix in REALIZATIONS]
    vgp = [first_test(study, f"draw_vgp_default{suffix}") for _, suffix in REALIZATIONS]
    if any(test is None for test in [*vae, vgp[0]]):
        return "is not measured yet"
    spread = abs(vae[0]["nll"] - vae[1]["nll"])
    lead = vae[0]["nll"] - vgp[0]["nll"]
    images = vae[0]["n_examples"]
    compared = "more" if spread > abs(lead) else "less"
    text = (
        f"lie {spread:.2f} nats apart (IS, the first {images} test images), {compared} than the "
        f"{abs(lead):.2f} nats by which the first machine's "
        + ("VGP led its VAE" if lead > 0 else "VAE led its VGP")
    )
    if vgp[1] is None:
        return text
    this_lead = vae[1]["nll"] - vgp[1]["nll"]
    kept = "keeps its sign" if lead * this_lead > 0 else "changes sign"
    return (
        f"{text}; the two of DRAW + VGP, the default, lie {abs(vgp[0]['nll'] - vgp[1]['nll']):.2f}"
        f" nats apart, and VAE - VGP is {lead:+.2f} nats on the first machine's pair and "
        f"{this_lead:+.2f} on this machine's: it {kept} from one realization of the pair to the "
        "other"
    )


# the VGP head statistics the DRAW reading quotes (docs/design.md, 5.2), as the runs record them
WARP_KEYS = (
    "z/warp_share", "z/nonlinear_warp_share", "z/variance_dispersion", "z/total_correlation"
)  # fmt: skip


def draw_tested(study: str = D) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """The finished DRAW runs with a test: run -> (label, metrics, the evaluation shown)."""
    tested = {}
    for label, run, _ in DRAW_RUNS:
        metrics = load(study, run) if has_run(study, run) else {}
        evaluation = chosen_evaluation(metrics) if metrics.get("status") == "finished" else None
        if evaluation is not None:
            tested[run] = (label, metrics, evaluation)
    return tested


def aux_gap_cell(metrics: dict[str, Any], evaluation: dict[str, Any]) -> str:
    """The auxiliary gap with its standard error and the test images it was measured on, from
    the evaluation shown or else the end-of-training test (VGP; — for a family without r)."""
    record = evaluation if "aux_gap" in evaluation else (metrics.get("test") or {})
    gap = record.get("aux_gap")
    if gap is None or not math.isfinite(gap):
        return "—"
    stderr = record.get("aux_gap_stderr")
    cell = f"{gap:.2f}" if stderr is None else f"{gap:.2f} ± {stderr:.2f}"
    images = record.get("aux_gap_examples")
    return cell if images is None else f"{cell} ({images} images)"


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
        cells += [number(last(study, run, key), ".2g") for key in WARP_KEYS]
        rows.append(cells)
    if not rows:
        return "No DRAW run is tested yet."
    return table(header, rows)


# the DRAW reading's thresholds: a k-hat share above UNRELIABLE_SHARE of the test images makes
# the IS columns unreliable; below AFFINE_SHARE (nonlinear part of the warp, and the spread of
# z changing with xi, both relative to q's own noise) and FACTORIZED_NATS (total correlation)
# the default VGP's q is read as close to a mean-field Gaussian
UNRELIABLE_SHARE, AFFINE_SHARE, FACTORIZED_NATS = 0.5, 0.01, 0.1


def draw_reading(study: str = D) -> str:
    """What the tested DRAW runs' diagnostics say of the VAE - VGP difference, in words
    generated from them: how reliable the IS estimates are, and whether the default VGP's q
    uses the GP's nonlinearity."""
    tested = {run: evaluation for run, (_, _, evaluation) in draw_tested(study).items()}
    if not tested:
        return "No DRAW run is tested yet."
    sentences = []
    shares = [evaluation.get("pareto_k_above_0_7") for evaluation in tested.values()]
    if max((s for s in shares if s is not None and math.isfinite(s)), default=0.0) > (
        UNRELIABLE_SHARE
    ):
        means = [evaluation.get("pareto_k_mean") for evaluation in tested.values()]
        above_one = any(m is not None and m > 1 for m in means)
        sentences.append(
            "For most test images the importance weights at this S have a k-hat above 0.7"
            + (
                " (on average above 1: a few draws' weights make up each image's estimate)"
                if above_one
                else ""
            )
            + ". Every IS estimate of -log p(x) is an upper bound in expectation; here its slack "
            "may be large, and the standard error over the test images does not show it. The "
            "IS differences then carry a bias of unknown sign; the -bound differences, unbiased "
            "for the bounds they compare, are the ones to read beside them."
        )
    run = DRAW_RUNS[1][1]
    values = [last(study, run, key) for key in WARP_KEYS] if run in tested else []
    known = [value for value in values if value is not None]
    if values and len(known) == len(values):
        warp, nonlinear, dispersion, correlation = known
        described = (
            "The default VGP's q at its last epoch, at DRAW's first glimpse (the diagnostics "
            "read each site's first call) on validation images: warp share "
            f"{number(warp, '.3g')}, nonlinear share {number(nonlinear, '.2g')}, variance "
            f"dispersion {number(dispersion, '.2g')}, total correlation "
            f"{number(correlation, '.2g')} nats."
        )
        if (
            nonlinear < AFFINE_SHARE * max(warp, 1.0)
            and dispersion < AFFINE_SHARE
            and correlation < FACTORIZED_NATS
        ):
            described += (
                " The latent input moves z, but affinely, the spread of z hardly changes with "
                "it, and the dependence it adds between z's coordinates is worth less than "
                f"{FACTORIZED_NATS} nats of entropy: there q is close to a mean-field Gaussian "
                "parametrized otherwise, so what it gains or loses against the VAE at these "
                "epochs is not shown to come from the GP's nonlinearity (this study has no DRAW "
                "control without the GP; the convergence study has one for the DLGMs)."
            )
        else:
            described += (
                " The warp has a nonlinear part, the spread of z changes with the latent input, "
                "or z's coordinates depend on each other: there q is not a mean-field Gaussian "
                "in disguise."
            )
        sentences.append(described)
    return " ".join(sentences)


TABLES: dict[str, Callable[[], str]] = {
    "test": test_table,
    "dlgm1-differences": lambda: differences_table(DLGM1, [0, 1, 2], paper=True),
    "dlgm2-differences": lambda: differences_table(DLGM2, [0, 1], paper=False),
    "dlgm2-paper": dlgm2_paper_table,
    "dlgm2-epochs": dlgm2_epochs_table,
    "dlgm1-epochs": dlgm1_epochs_table,
    "dlgm1-best-valid": best_valid_table,
    "pilots": pilots_table,
    "fixed": fixed_table,
    "local": local_table,
    "families": families_table,
    "convergence": convergence_table,
    "convergence-differences": convergence_differences_table,
    "convergence-answer-dlgm1": convergence_answer,
    "convergence-answer-dlgm2": lambda: convergence_answer(family="dlgm2"),
    "calibration": calibration_table,
    "calibration-data": calibration_data_table,
    "calibration-differences": calibration_differences_table,
    "draw": draw_table,
    "draw-differences": draw_differences_table,
    "draw-fit": draw_fit_table,
    "draw-realizations": draw_realizations_table,
}


def lead(a: str, b: str, key: str = "nll") -> float:
    """Test quantity of run `a` minus run `b` (positive: b is ahead)."""
    return test_of(V, a)[key] - test_of(V, b)[key]


def dlgm2_leads() -> list[float]:
    """Every dlgm2 run with r learned against the VAE of its seed (IS)."""
    runs = ["dlgm2_vgp_best", "dlgm2_vgp_linear"]
    leads = [lead(f"dlgm2_vae_s{s}", f"{r}_s{s}") for r in runs for s in (0, 1)]
    return [*leads, lead("dlgm2_vae_s0", "dlgm2_vgp_paper_s0")]


def fixed_r_gap(only: int | None = None) -> tuple[int, float]:
    """Epoch and value of the largest |fixed-r control - VAE| validation gap, dlgm2 seed 0
    (at epoch `only` if given)."""
    gaps = [
        (
            e,
            (valid_at(V, "dlgm2_vgp_linear_fixed_r_s0", e) or 0)
            - (valid_at(V, "dlgm2_vae_s0", e) or 0),
        )
        for e in ([only] if only else range(1, 101))
    ]
    return max(gaps, key=lambda g: abs(g[1]))


def wall_times() -> list[float]:
    """wall_time_s of every family run."""
    return [load(F, run)["wall_time_s"] for _, run in FAMILIES]


def shared_epochs(family_run: str, study_run: str) -> bool:
    """Whether a family run's validation curve is the 100-epoch run's first 10 epochs."""
    ours = [entry["valid_bound"] for entry in load(F, family_run)["history"]]
    theirs = [entry["valid_bound"] for entry in load(V, study_run)["history"]][: len(ours)]
    return ours == theirs


def fam(run: str, key: str) -> float:
    """A family run's test quantity."""
    return test_of(F, run)[key]


# the study script's defaults of the settings the README quotes, for a study with no run yet
CONVERGENCE_DEFAULTS = {
    "trainer.early_stopping.min_delta": "MIN_DELTA",
    "trainer.early_stopping.patience": "PATIENCE",
    "trainer.epochs": "CAP",
}


def convergence_setting(key: str) -> str:
    """A trainer setting of the study's runs, as the first committed run's config resolved it
    (before the first run: the study script's default)."""
    configs = sorted((RESULTS / C / "runs").glob("*/config.yaml"))
    if configs:
        return str(run_setting(C, configs[0].parent.name, key))
    return script_default("study_convergence.sh", CONVERGENCE_DEFAULTS[key])


def last_window_gain(metrics: dict[str, Any], window: int) -> float | None:
    """How much a run's best validation bound gained over its last `window` epochs (None for
    a run of `window` epochs or fewer)."""
    bounds = [entry["valid_bound"] for entry in metrics["history"]]  # one per epoch, in order
    if len(bounds) <= window:
        return None
    return max(bounds) - max(bounds[:-window])


def stop_gains(study: str = C) -> str:
    """What the curves were still doing at the stop, over every tested run the early stopping
    ended: the range of its best bound's gain over the last `patience` epochs, and how near the
    last epoch the best came."""
    patience = int(convergence_setting("trainer.early_stopping.patience"))
    tested = (
        load(study, f"{name}_s{seed}")
        for _, name in CONVERGENCE_ROWS
        for seed in tested_seeds(study, name)
    )
    stopped = [m for m in tested if m.get("stop_reason") == "early_stopping"]
    gains = [gain for m in stopped if (gain := last_window_gain(m, patience)) is not None]
    if not gains:
        return "No tested run has been stopped by the early stopping yet."
    to_last = max(m["epochs_completed"] - best_epoch(m) for m in stopped)
    return (
        f"At their stops, the best validation bounds of the {len(gains)} tested runs had gained "
        f"from {min(gains):.3f} to {max(gains):.3f} nats over their last {patience} epochs, and "
        f"each run's best epoch was at most {to_last} epochs before its last: a stop here marks "
        "a curve still rising, only slower than the threshold, not a flat one, and every row is "
        "compared below that same threshold."
    )


def script_default(script: str, name: str) -> str:
    """The default `${NAME:-default}` a study script gives its variable `name`."""
    script_text = (ROOT / "scripts" / script).read_text()
    found = re.search(rf"\${{{name}:-([^}}]+)}}", script_text)
    assert found is not None, (script, name)
    return found.group(1)


def draw_paper_costs() -> dict[str, float]:
    """What the DRAW study's paper-form row would cost on one CPU thread, from the step and
    evaluation times results/reproduction/costs.json measured for `experiment=table1_draw_vgp`:
    seconds a training step, milliseconds an image and sample of the test, and the CPU-hours
    of the study's epochs (training and validation) and of its test on all test images."""
    costs = json.loads((RESULTS / "reproduction" / "costs.json").read_text())
    (row,) = [r for r in costs["rows"].values() if r["command"].endswith("table1_draw_vgp")]
    timed = row["evaluation_timed"]
    image_sample_s = timed["seconds"] / (timed["images_timed"] * timed["samples"])
    epochs, samples = (int(script_default("study_draw.sh", name)) for name in ("EPOCHS", "SAMPLES"))
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


VALUES: dict[str, Callable[[], str]] = {
    "draw.reading": draw_reading,
    "draw.realizations.vae": draw_realization_spread,
    "draw.paper.step_s": lambda: f"{draw_paper_costs()['step_s']:.1f}",
    "draw.paper.image_sample_ms": lambda: f"{draw_paper_costs()['image_sample_ms']:.0f}",
    "draw.paper.training_h": lambda: f"{draw_paper_costs()['training_h']:.0f}",
    "draw.paper.test_h": lambda: f"{draw_paper_costs()['test_h']:.0f}",
    "calibration.anchor": lambda: f"{calibration_anchor():.2f}",
    "calibration.tolerance": lambda: f"{CALIBRATION_TOLERANCE}",
    "calibration.lost.epochs": lambda: str(lost_runs_agreement()[0]),
    "calibration.lost.best_gap": lambda: f"{lost_runs_agreement()[1]:.2f}",
    "calibration.lost.epoch_gap": lambda: f"{lost_runs_agreement()[2]:.2f}",
    "calibration.status": calibration_status,
    **{
        f"calibration.test.{key}": functools.partial(lambda key: calibration_reading()[key], key)
        for key in ("se", "images", "samples", "khat_share", "bound_gap")
    },
    "calibration.repeat": lambda: repeat_of(K, PROTOCOL_RUN, CALIBRATION_LOST[-1]),
    "convergence.paper.repeat": lambda: repeat_of(
        C, "dlgm2_vgp_paper_s0", "dlgm2_vgp_paper_lost2_s0"
    ),
    "convergence.twin.repeat": lambda: repeat_of(
        C, "dlgm2_vgp_paper_affine_s0", "dlgm2_vgp_paper_affine_lost1_s0"
    ),
    "convergence.twin.lead_at_stops": lambda: lead_at_stops(
        C, "dlgm2_vgp_paper_affine_s0", "dlgm2_vgp_paper_s0", ("the twin", "the paper form")
    ),
    "convergence.twin.realization_gap": lambda: realization_gap(
        C, "dlgm2_vgp_paper_affine_s0", "dlgm2_vgp_paper_affine_lost1_s0", 100
    ),
    "convergence.patience": lambda: convergence_setting("trainer.early_stopping.patience"),
    "convergence.cap": lambda: convergence_setting("trainer.epochs"),
    "convergence.min_delta": lambda: convergence_setting("trainer.early_stopping.min_delta"),
    "convergence.stop_gains": stop_gains,
    "dlgm2.lead.min": lambda: f"{min(dlgm2_leads()):.2f}",
    "dlgm2.lead.max": lambda: f"{max(dlgm2_leads()):.2f}",
    "dlgm2.paper.lead.s1": lambda: f"{lead('dlgm2_vae_s1', 'dlgm2_vgp_paper_s0'):.2f}",
    "dlgm2.fixed_r.behind": lambda: f"{-lead('dlgm2_vae_s0', 'dlgm2_vgp_linear_fixed_r_s0'):.2f}",
    "dlgm2.fixed_r.bound_lead": lambda: (
        f"{lead('dlgm2_vae_s0', 'dlgm2_vgp_linear_fixed_r_s0', 'bound_nll'):.2f}"
    ),
    "dlgm2.fixed_r.max_gap": lambda: f"{abs(fixed_r_gap()[1]):.2f}",
    "dlgm2.fixed_r.max_gap_epoch": lambda: str(fixed_r_gap()[0]),
    "dlgm2.fixed_r.gap_at_100": lambda: f"{abs(fixed_r_gap(100)[1]):.2f}",
    "dlgm1.best.lead": lambda: (
        f"{difference('dlgm1_vae', 'dlgm1_vgp_best', [0, 1, 2], 'nll')[0]:.2f}"
    ),
    "dlgm1.control.lead": lambda: (
        f"{difference('dlgm1_vae', 'dlgm1_vgp_linear', [0, 1, 2], 'nll')[0]:.2f}"
    ),
    "dlgm1.paper.behind": lambda: (
        f"{-difference('dlgm1_vae', 'dlgm1_vgp_paper', [0, 1, 2], 'nll')[0]:.2f}"
    ),
    "dlgm2.paper.hours": lambda: f"{load(V, 'dlgm2_vgp_paper_s0')['wall_time_s'] / 3600:.1f}",
    "families.wall.min": lambda: f"{min(wall_times()):.0f}",
    "families.wall.max": lambda: f"{max(wall_times()):.0f}",
    "families.wall.ratio": lambda: f"{max(wall_times()) / min(wall_times()):.0f}",
    "families.hvi.bound_gain": lambda: (
        f"{fam('fam_vae', 'bound_nll') - fam('fam_hvi', 'bound_nll'):.1f}"
    ),
    "families.iwae.is_gain": lambda: f"{fam('fam_vae', 'nll') - fam('fam_iwae', 'nll'):.1f}",
    "families.nf.is_gain": lambda: f"{fam('fam_vae', 'nll') - fam('fam_nf', 'nll'):.1f}",
    "families.best.is_gain": lambda: f"{fam('fam_vae', 'nll') - fam('fam_vgp_best', 'nll'):.1f}",
    "families.control.is_gain": lambda: (
        f"{fam('fam_vae', 'nll') - fam('fam_vgp_linear', 'nll'):.1f}"
    ),
    "families.paper.is_behind": lambda: (
        f"{fam('fam_vgp_paper', 'nll') - fam('fam_vae', 'nll'):.1f}"
    ),
    "families.shared": lambda: str(
        sum(
            shared_epochs(f, v)
            for f, v in [
                ("fam_vae", "dlgm1_vae_s0"),
                ("fam_vgp_best", "dlgm1_vgp_best_s0"),
                ("fam_vgp_linear", "dlgm1_vgp_linear_s0"),
                ("fam_vgp_paper", "dlgm1_vgp_paper_s0"),
            ]
        )
    ),
}


def render(text: str) -> str:
    """The README text with every generated table and value rewritten from the runs."""
    text = TABLE.sub(lambda m: m[1] + "\n" + TABLES[m[2]]() + "\n" + m[4], text)
    return VALUE.sub(lambda m: m[1] + VALUES[m[2]]() + m[4], text)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with --check, compare) the results READMEs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a README is out of date")
    args = parser.parse_args(argv)
    stale = []
    for study in READMES:
        path = RESULTS / study / "README.md"
        text = path.read_text()
        new = render(text)
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print("out of date (run scripts/results_readme.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
