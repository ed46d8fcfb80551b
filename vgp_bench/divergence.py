"""When a run counts as diverged: its test result is not finite, or clearly worse than the
model that gives every pixel probability 1/2 (-log p(x) = D log 2 nats, 543.4 for MNIST)."""

from __future__ import annotations

import math
from typing import Any

# An untrained model sits near D log 2 (random weights, the KL term): "clearly worse" means
# more than this fraction above it, and more than STDERRS standard errors of the estimate.
RELATIVE_TOLERANCE = 0.05
STDERRS = 3.0


def trivial_nll(pixels: int) -> float:
    """-log p(x) in nats of the model that gives each of `pixels` probability 1/2."""
    return pixels * math.log(2.0)


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def divergence_reason(test: dict[str, Any], trivial: float | None) -> str | None:
    """Why a test result (`nll`, `bound_nll`, `nll_stderr`) marks a diverged run, or None."""
    bad = [key for key in ("nll", "bound_nll") if not is_finite_number(test.get(key))]
    if bad:
        return f"test {', '.join(bad)} is {test.get(bad[0])!r}, not finite"
    if trivial is None:
        return None
    stderr = test.get("nll_stderr")
    margin = STDERRS * stderr if is_finite_number(stderr) else 0.0
    if test["nll"] - margin > trivial * (1.0 + RELATIVE_TOLERANCE):
        return (
            f"test -log p(x) {test['nll']:.4g} is worse than {trivial:.2f} nats, the model "
            "that gives every pixel probability 1/2"
        )
    return None


def divergence(test: dict[str, Any] | None, x_shape: tuple[int, ...]) -> dict[str, Any]:
    """What metrics.json records about divergence: trivial_nll, diverged, diverged_reason."""
    trivial = trivial_nll(math.prod(x_shape))
    reason = divergence_reason(test, trivial) if test is not None else None
    return {"trivial_nll": trivial, "diverged": reason is not None, "diverged_reason": reason}
