"""The local-gap fits (results/local_gap/local_gap.json): per-image fits of each family on one
decoder, quoted by the vgp_vs_vae README."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from vgp_bench.studies import runs
from vgp_bench.studies.cells import MISSING, signed, table

FITS = [
    ("the VAE's encoder (amortized mean-field)", "amortized"),
    ("mean-field, fitted per image", "mean_field"),
    ("VGP (black-box form: m = 32, dense T), fitted per image", "vgp"),
    ("planar flow k = 16, fitted per image", "planar_flow"),
]


def local() -> dict[str, Any]:
    """results/local_gap/local_gap.json."""
    return json.loads((runs.RESULTS / "local_gap" / "local_gap.json").read_text())


def local_gaps(family: str) -> list[float]:
    """Per image: log p(x) (each image's best IS estimate) minus the family's bound."""
    gaps = []
    for image in local()["per_image"]:
        best = max(image[f]["log_likelihood"] for f in local()["summary"])
        gaps.append(best - image[family]["bound"])
    return gaps


def versus_mean_field(family: str) -> str:
    """A family's mean gap minus the mean-field fit's, paired over the images."""
    summary = local()["summary"]
    diffs = [g - f for g, f in zip(local_gaps(family), local_gaps("mean_field"), strict=True)]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    better = sum(d < 0 for d in diffs)
    gain = summary[family]["gap"] - summary["mean_field"]["gap"]
    return f"{signed(gain)} ± {se:.2f} (better on {better} of {len(diffs)})"


def local_table() -> str:
    """The per-image fits: mean and median gap, and against the mean-field fit."""
    summary = local()["summary"]
    rows = []
    for label, family in FITS:
        s = summary[family]
        versus = MISSING if family == "mean_field" else versus_mean_field(family)
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
