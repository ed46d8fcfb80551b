"""The fixed-decoder study (results/fixed_decoder): each family's q trained on one decoder,
quoted by the vgp_vs_vae README."""

from __future__ import annotations

from vgp_bench.studies import runs
from vgp_bench.studies.cells import MISSING, signed, table

STUDY = "fixed_decoder"
FIXED = [
    ("VAE (a fresh mean-field encoder)", "fixed_vae"),
    ("VGP, best configuration", "fixed_vgp_best"),
    ("VGP, best configuration with per-example outputs (shared_basis T)", "fixed_vgp_shared_basis"),
    ("control (no GP)", "fixed_vgp_linear"),
    ("VGP, the paper's form (dense T(h), zero mean)", "fixed_vgp_paper"),
]


def fixed_table() -> str:
    """Each family's q trained on the fixed decoder: validation, test, and the warp statistics."""
    vae_bound = runs.test_of(STUDY, "fixed_vae")["bound_nll"]
    rows = []
    for label, run in FIXED:
        test = runs.test_of(STUDY, run)
        share = runs.last(STUDY, run, "z/warp_share")
        nonlinear = runs.last(STUDY, run, "z/nonlinear_warp_share")
        rows.append(
            [
                label,
                f"{runs.best_valid(STUDY, run):.2f}",
                f"{test['nll']:.2f}",
                f"{test['bound_nll']:.2f}",
                signed(test["bound_nll"] - vae_bound),
                MISSING if share is None else f"{share:.3g} / {nonlinear:.2g}",
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
