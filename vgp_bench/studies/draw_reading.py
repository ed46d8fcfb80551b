"""What tested DRAW runs' diagnostics say of the VAE - VGP difference, in words generated from
them: how reliable the IS estimates are, and whether the default VGP's q uses the GP's
nonlinearity (docs/design.md, 5.2)."""

from __future__ import annotations

import math
from typing import Any

from vgp_bench.studies import runs
from vgp_bench.studies.cells import number

# the VGP head statistics the DRAW reading quotes (docs/design.md, 5.2), as the runs record them
WARP_KEYS = (
    "z/warp_share", "z/nonlinear_warp_share", "z/variance_dispersion", "z/total_correlation"
)  # fmt: skip
# the DRAW reading's thresholds: a k-hat share above UNRELIABLE_SHARE of the test images makes
# the IS columns unreliable; below AFFINE_SHARE (nonlinear part of the warp, and the spread of
# z changing with xi, both relative to q's own noise) and FACTORIZED_NATS (total correlation)
# the default VGP's q is read as close to a mean-field Gaussian
UNRELIABLE_SHARE, AFFINE_SHARE, FACTORIZED_NATS = 0.5, 0.01, 0.1


def reliability(tested: dict[str, dict[str, Any]]) -> str | None:
    """A warning when most test images' importance weights have a k-hat above 0.7."""
    shares = [evaluation.get("pareto_k_above_0_7") for evaluation in tested.values()]
    finite = (s for s in shares if s is not None and math.isfinite(s))
    if max(finite, default=0.0) <= UNRELIABLE_SHARE:
        return None
    means = [evaluation.get("pareto_k_mean") for evaluation in tested.values()]
    above_one = any(m is not None and m > 1 for m in means)
    return (
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


def described(warp: float, nonlinear: float, dispersion: float, correlation: float) -> str:
    """The default VGP's q at its last epoch, in words: close to mean-field or not."""
    text = (
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
        return text + (
            " The latent input moves z, but affinely, the spread of z hardly changes with "
            "it, and the dependence it adds between z's coordinates is worth less than "
            f"{FACTORIZED_NATS} nats of entropy: there q is close to a mean-field Gaussian "
            "parametrized otherwise, so what it gains or loses against the VAE at these "
            "epochs is not shown to come from the GP's nonlinearity (this study has no DRAW "
            "control without the GP; the convergence study has one for the DLGMs)."
        )
    return text + (
        " The warp has a nonlinear part, the spread of z changes with the latent input, "
        "or z's coordinates depend on each other: there q is not a mean-field Gaussian "
        "in disguise."
    )


def reading(study: str, tested: dict[str, dict[str, Any]], vgp_run: str) -> str:
    """The reading of the tested runs (run -> the evaluation shown), with the default VGP's
    run `vgp_run` described where it is tested and records every statistic."""
    if not tested:
        return "No DRAW run is tested yet."
    sentences = [warning for warning in [reliability(tested)] if warning is not None]
    values = [runs.last(study, vgp_run, key) for key in WARP_KEYS] if vgp_run in tested else []
    known = [value for value in values if value is not None]
    if values and len(known) == len(values):
        sentences.append(described(*known))
    return " ".join(sentences)
