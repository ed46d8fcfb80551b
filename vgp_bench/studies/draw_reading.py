"""What tested DRAW runs' diagnostics say of the VAE - VGP difference, in words generated from
them: how reliable the IS estimates are, and whether the default VGP's q uses the GP's
nonlinearity (docs/design.md, 5.2)."""

from __future__ import annotations

from typing import Any

from vgp_bench.studies import runs
from vgp_bench.studies.q_reading import (
    WARP_KEYS,
    close_to_mean_field,
    mean_field_words,
    reliability,
    statistics_text,
)


def described(warp: float, nonlinear: float, dispersion: float, correlation: float) -> str:
    """The default VGP's q at its last epoch, in words: close to mean-field or not."""
    text = (
        "The default VGP's q at its last epoch, at DRAW's first glimpse (the diagnostics "
        "read each site's first call) on validation images: "
        f"{statistics_text(warp, nonlinear, dispersion, correlation)}."
    )
    close = close_to_mean_field(warp, nonlinear, dispersion, correlation)
    return text + mean_field_words(
        close,
        "this study has no DRAW control without the GP; the convergence study has one for "
        "the DLGMs",
    )


def reading(study: str, tested: dict[str, dict[str, Any]], vgp_run: str) -> str:
    """The reading of the tested runs (run -> the evaluation shown), with the default VGP's
    run `vgp_run` described where it is tested and records every statistic."""
    if not tested:
        return "No DRAW run is tested yet."
    sentences = [warning for warning in [reliability(tested.values())] if warning is not None]
    values = [runs.last(study, vgp_run, key) for key in WARP_KEYS] if vgp_run in tested else []
    known = [value for value in values if value is not None]
    if values and len(known) == len(values):
        sentences.append(described(*known))
    return " ".join(sentences)
