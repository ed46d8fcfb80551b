"""Step-size schedules as multiplicative factors of the base learning rate."""

from __future__ import annotations


def paper_decay(step: int, epsilon: float = 0.01, time_scale: float = 1000.0) -> float:
    """(1 + t / tau)^-(1/2 + epsilon): the paper's 1/t^(1/2+eps) RMSProp decay (Section 5).

    `time_scale` tau delays the decay; tau = 1 gives the paper's form (t + 1)^-(1/2+eps).
    """
    return (1.0 + step / time_scale) ** -(0.5 + epsilon)


def constant(step: int) -> float:
    """No decay."""
    return 1.0
