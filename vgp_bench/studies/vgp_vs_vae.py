"""The 100-epoch study (results/vgp_vs_vae): DLGM 1hl and 2hl with the VAE, the best VGP, its
control without the GP and the paper's configuration; its pilots, the fixed decoder's q and the
local-gap fits."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from vgp_bench.analysis.report.rows import estimate
from vgp_bench.studies import runs
from vgp_bench.studies.cells import (
    MISSING,
    difference_cell,
    estimate_text,
    number,
    share_cell,
    signed,
    table,
)
from vgp_bench.studies.differences import difference
from vgp_bench.studies.fixed_decoder import fixed_table
from vgp_bench.studies.local_gap import local_table
from vgp_bench.studies.study import Study

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
PAIRS = [
    ("VAE - best VGP", "VAE", "best VGP"),
    ("VAE - control (no GP)", "VAE", "control (no GP)"),
    ("control - best VGP: what the GP adds", "control (no GP)", "best VGP"),
]
PAPER_PAIR = ("VAE - the paper's configuration", "VAE", "the paper's configuration")
DLGM2_PAPER_ROWS = [
    ("VAE, seed 0", "dlgm2_vae_s0"),
    ("best VGP, seed 0", "dlgm2_vgp_best_s0"),
    ("control (r learned), seed 0", "dlgm2_vgp_linear_s0"),
]
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
DLGM1_CURVES = [
    ("best VGP", "dlgm1_vgp_best"),
    ("control (no GP)", "dlgm1_vgp_linear"),
    ("paper's configuration", "dlgm1_vgp_paper"),
]
PILOTS = [
    ("VAE (reference: dlgm1_vae_s0, same seed and protocol)", "dlgm1_vae_s0"),
    ("free sigma, global T", "pilot_identity_global"),
    ("free sigma, shared_basis T", "pilot_identity_shared_basis"),
    ("free sigma, dense T (stopped after epoch 1: slowest)", "pilot_identity_dense"),
    ("**tied sigma = 0.1 s(h), global T** (chosen)", "pilot_tied_global"),
    ("tied sigma, shared_basis T (stopped after epoch 8)", "pilot_tied_shared_basis"),
    ("tied sigma, global T, K = 4 auxiliary samples", "pilot_tied_global_k4"),
]


def pooled(names: Sequence[str], key: str) -> str:
    """Mean ± standard error of a test quantity over the runs (seeds)."""
    tests = [runs.test_of(V, run) for run in names]
    return estimate_text(estimate([t[key] for t in tests], [tests[0].get(f"{key}_stderr")]))


def test_table() -> str:
    """The 100-epoch study's test results, a row per method (dlgm1) or per run (dlgm2)."""
    rows = []
    for label, names in TEST_ROWS:
        tests = [runs.test_of(V, run) for run in names]
        nll = statistics.fmean(t["nll"] for t in tests)
        bound = statistics.fmean(t["bound_nll"] for t in tests)
        aux = [t["aux_gap"] for t in tests if "aux_gap" in t]
        seeds = ", ".join(str(runs.load(V, run)["seed"]) for run in names)
        khat = statistics.fmean(t["pareto_k_above_0_7"] for t in tests)
        rows.append(
            [
                label,
                seeds,
                pooled(names, "nll"),
                pooled(names, "bound_nll"),
                f"{bound - nll:.2f}",
                f"{statistics.fmean(aux):.2f}" if aux else MISSING,
                share_cell(khat),
            ]
        )
    header = ["method", "seeds", "-log p(x) (IS)", "-bound", "bound - IS", "aux gap", "k-hat > 0.7"]
    return table(header, rows)


def differences_table(names: dict[str, str], seeds: Sequence[int], paper: bool) -> str:
    """Differences of the test means, unpaired standard errors, and the per-seed differences."""
    rows = []
    for label, a, b in [*PAIRS, PAPER_PAIR] if paper else PAIRS:
        cells: list[object] = [label]
        for key in ("nll", "bound_nll"):
            diff, se, per_seed = difference(names[a], names[b], seeds, key, V)
            cells.append(difference_cell(diff, se))
            cells.append(", ".join(signed(d) for d in per_seed))
        rows.append(cells)
    header = ["", "-log p(x) (IS)", "IS, per seed", "-bound", "bound, per seed"]
    return table(header, rows)


def dlgm2_paper_table() -> str:
    """The one-seed paper's configuration on dlgm2 against each seed-0 run (SE over images)."""
    rows = []
    for label, run in DLGM2_PAPER_ROWS:
        cells: list[object] = [f"{label} - the paper's configuration"]
        for key in ("nll", "bound_nll"):
            a, b = runs.test_of(V, run), runs.test_of(V, "dlgm2_vgp_paper_s0")
            se = math.hypot(a[f"{key}_stderr"], b[f"{key}_stderr"])
            cells.append(difference_cell(a[key] - b[key], se))
        rows.append(cells)
    return table(["dlgm2", "-log p(x) (IS)", "-bound"], rows)


def dlgm2_epochs_table() -> str:
    """dlgm2 validation bounds at a few epochs and the best."""
    epochs = [1, 3, 10, 30, 50, 70, 100]
    rows = [
        [
            label,
            *(f"{runs.valid_at(V, run, e):.2f}" for e in epochs),
            f"{runs.best_valid(V, run):.2f}",
        ]
        for label, run in DLGM2_CURVES
    ]
    return table(["dlgm2 validation bound, epoch", *map(str, epochs), "best"], rows)


def vae_valid(epoch: int) -> list[float]:
    """The dlgm1 VAE seeds' validation bounds at `epoch` (nan where a seed did not get there)."""
    return [runs.valid_at(V, f"dlgm1_vae_s{s}", epoch) or math.nan for s in range(3)]


def dlgm1_epochs_table() -> str:
    """dlgm1 validation bounds every 10 epochs, each run minus the VAE seeds' mean."""
    epochs = list(range(10, 101, 10))
    vae = [vae_valid(e) for e in epochs]
    rows: list[list[object]] = [
        ["VAE, mean of seeds 0-2", *(f"{statistics.fmean(v):.2f}" for v in vae)],
        ["VAE, seed spread (max - min)", *(f"{max(v) - min(v):.2f}" for v in vae)],
    ]
    for label, prefix in DLGM1_CURVES:
        for seed in range(3):
            values = [
                (runs.valid_at(V, f"{prefix}_s{seed}", e) or math.nan) - statistics.fmean(v)
                for e, v in zip(epochs, vae, strict=True)
            ]
            rows.append([f"{label}, seed {seed}, minus the VAE mean", *map(signed, values)])
    return table(["epoch", *map(str, epochs)], rows)


def best_valid_table() -> str:
    """The best validation bound of each dlgm1 run (the checkpoint tested)."""
    rows = [
        [label, *(f"{runs.best_valid(V, f'{prefix}_s{s}'):.2f}" for s in range(3))]
        for label, prefix in DLGM1.items()
    ]
    return table(["dlgm1 best validation bound", "seed 0", "seed 1", "seed 2"], rows)


def pilots_table() -> str:
    """Validation bounds of the pilots after epochs 1, 2, 5, 8, 10, and their warp statistics."""
    epochs = [1, 2, 5, 8, 10]
    rows = []
    for label, run in PILOTS:
        vgp = not run.startswith("dlgm1")
        share = runs.last(V, run, "z/warp_share") if vgp else None
        nonlinear = runs.last(V, run, "z/nonlinear_warp_share") if vgp else None
        rows.append(
            [
                label,
                *(number(runs.valid_at(V, run, e), ".2f") for e in epochs),
                number(share, ".3g"),
                number(nonlinear, ".2g"),
            ]
        )
    header = [
        "candidate",
        *(f"e{e}" for e in epochs),
        "warp share",
        "nonlinear share (as recorded)",
    ]
    return table(header, rows)


def lead(a: str, b: str, key: str = "nll") -> float:
    """Test quantity of run `a` minus run `b` (positive: b is ahead)."""
    return runs.test_of(V, a)[key] - runs.test_of(V, b)[key]


def dlgm2_leads() -> list[float]:
    """Every dlgm2 run with r learned against the VAE of its seed (IS)."""
    names = ["dlgm2_vgp_best", "dlgm2_vgp_linear"]
    leads = [lead(f"dlgm2_vae_s{s}", f"{r}_s{s}") for r in names for s in (0, 1)]
    return [*leads, lead("dlgm2_vae_s0", "dlgm2_vgp_paper_s0")]


def fixed_r_gap(only: int | None = None) -> tuple[int, float]:
    """Epoch and value of the largest |fixed-r control - VAE| validation gap, dlgm2 seed 0
    (at epoch `only` if given)."""
    gaps = [
        (
            e,
            (runs.valid_at(V, "dlgm2_vgp_linear_fixed_r_s0", e) or 0)
            - (runs.valid_at(V, "dlgm2_vae_s0", e) or 0),
        )
        for e in ([only] if only else range(1, 101))
    ]
    return max(gaps, key=lambda g: abs(g[1]))


def dlgm1_lead(b: str) -> float:
    """The dlgm1 VAE's test IS minus row `b`'s, means over seeds 0-2."""
    return difference("dlgm1_vae", b, [0, 1, 2], "nll", V)[0]


STUDY = Study(
    V,
    tables={
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
    },
    values={
        "dlgm2.lead.min": lambda: f"{min(dlgm2_leads()):.2f}",
        "dlgm2.lead.max": lambda: f"{max(dlgm2_leads()):.2f}",
        "dlgm2.paper.lead.s1": lambda: f"{lead('dlgm2_vae_s1', 'dlgm2_vgp_paper_s0'):.2f}",
        "dlgm2.fixed_r.behind": lambda: (
            f"{-lead('dlgm2_vae_s0', 'dlgm2_vgp_linear_fixed_r_s0'):.2f}"
        ),
        "dlgm2.fixed_r.bound_lead": lambda: (
            f"{lead('dlgm2_vae_s0', 'dlgm2_vgp_linear_fixed_r_s0', 'bound_nll'):.2f}"
        ),
        "dlgm2.fixed_r.max_gap": lambda: f"{abs(fixed_r_gap()[1]):.2f}",
        "dlgm2.fixed_r.max_gap_epoch": lambda: str(fixed_r_gap()[0]),
        "dlgm2.fixed_r.gap_at_100": lambda: f"{abs(fixed_r_gap(100)[1]):.2f}",
        "dlgm1.best.lead": lambda: f"{dlgm1_lead('dlgm1_vgp_best'):.2f}",
        "dlgm1.control.lead": lambda: f"{dlgm1_lead('dlgm1_vgp_linear'):.2f}",
        "dlgm1.paper.behind": lambda: f"{-dlgm1_lead('dlgm1_vgp_paper'):.2f}",
        "dlgm2.paper.hours": lambda: (
            f"{runs.load(V, 'dlgm2_vgp_paper_s0')['wall_time_s'] / 3600:.1f}"
        ),
    },
)
