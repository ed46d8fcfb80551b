"""What a tested run's importance weights and a VGP's q say, in words any study's answer can
use: whether the IS estimates are reliable (PSIS k-hat), and whether the VGP's q is a mean-field
Gaussian in disguise (its head statistics, docs/design.md, 5.2)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from vgp_bench.studies.cells import number

# the VGP head statistics a reading quotes (docs/design.md, 5.2), as the runs record them
WARP_KEYS = (
    "z/warp_share", "z/nonlinear_warp_share", "z/variance_dispersion", "z/total_correlation"
)  # fmt: skip
# a k-hat share above UNRELIABLE_SHARE of the test images makes the IS columns unreliable;
# below AFFINE_SHARE (nonlinear part of the warp, and the spread of z changing with xi, both
# relative to q's own noise) and FACTORIZED_NATS (total correlation) the VGP's q is read as
# close to a mean-field Gaussian
UNRELIABLE_SHARE, AFFINE_SHARE, FACTORIZED_NATS = 0.5, 0.01, 0.1


def reliability(evaluations: Iterable[dict[str, Any]]) -> str | None:
    """A warning when most test images' importance weights have a k-hat above 0.7 in any of
    the tested runs' evaluations; None otherwise."""
    evaluations = list(evaluations)
    shares = [evaluation.get("pareto_k_above_0_7") for evaluation in evaluations]
    finite = (s for s in shares if s is not None and math.isfinite(s))
    if max(finite, default=0.0) <= UNRELIABLE_SHARE:
        return None
    means = [evaluation.get("pareto_k_mean") for evaluation in evaluations]
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


def statistics_text(warp: float, nonlinear: float, dispersion: float, correlation: float) -> str:
    """The four head statistics of WARP_KEYS as a phrase."""
    return (
        f"warp share {number(warp, '.3g')}, nonlinear share {number(nonlinear, '.2g')}, "
        f"variance dispersion {number(dispersion, '.2g')}, total correlation "
        f"{number(correlation, '.2g')} nats"
    )


def close_to_mean_field(
    warp: float, nonlinear: float, dispersion: float, correlation: float
) -> bool:
    """Whether q moves z only affinely in xi (the nonlinear part small beside q's own noise,
    or beside the warp where that is larger), keeps z's spread and factorizes."""
    return (
        nonlinear < AFFINE_SHARE * max(warp, 1.0)
        and dispersion < AFFINE_SHARE
        and correlation < FACTORIZED_NATS
    )


def mean_field_words(close: bool, evidence: str) -> str:
    """The reading of `close_to_mean_field` in two sentences; `evidence` says, in a clause,
    where the question of the GP's share is answered otherwise (a control without the GP)."""
    if close:
        return (
            " The latent input moves z, but affinely, the spread of z hardly changes with "
            "it, and the dependence it adds between z's coordinates is worth less than "
            f"{FACTORIZED_NATS} nats of entropy: there q is close to a mean-field Gaussian "
            "parametrized otherwise, so what it gains or loses against the VAE at these "
            f"epochs is not shown to come from the GP's nonlinearity ({evidence})."
        )
    return (
        " The warp has a nonlinear part, the spread of z changes with the latent input, "
        "or z's coordinates depend on each other: there q is not a mean-field Gaussian "
        "in disguise."
    )
