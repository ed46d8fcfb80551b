"""The non-finite policy of the optimization loops (vgp-train and vgp-fit).

A step whose bound or gradient norm is NaN/Inf, or whose Cholesky failed even at the largest
jitter, makes no update and is counted; `limit` such steps in a row stop the run with
NonFiniteTrainingError, and parameters that became non-finite are never saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from vgp_bench.errors import NonFiniteTrainingError


class SkipCount(Protocol):
    """Where a loop counts its skipped steps (the trainer's RunState, vgp-fit's own count)."""

    nonfinite_in_row: int
    nonfinite_total: int


@dataclass
class SkippedSteps:
    """A skip count of its own (for loops that keep no other state)."""

    nonfinite_in_row: int = 0
    nonfinite_total: int = 0


@dataclass(frozen=True)
class NonFinitePolicy:
    """What a loop does after each step."""

    limit: int | None  # skipped steps in a row that stop the run (None: never)

    def after_step(self, count: SkipCount, finite: bool) -> bool:
        """Count the step; whether it makes `limit` skipped steps in a row."""
        if finite:
            count.nonfinite_in_row = 0
            return False
        count.nonfinite_in_row += 1
        count.nonfinite_total += 1
        return self.limit is not None and count.nonfinite_in_row >= self.limit

    def error(self, step: int, details: str) -> NonFiniteTrainingError:
        """The error that stops the run at `step`; `details`: why, and what to do."""
        return NonFiniteTrainingError(
            f"the bound or its gradient was NaN/Inf for {self.limit} steps in a row (step "
            f"{step}){details}"
        )


def gradient_norm(parameters: Sequence[Tensor], clip: float | None = None) -> Tensor:
    """The global gradient norm, clipping the gradients to `clip` when it is set."""
    if clip:
        return torch.nn.utils.clip_grad_norm_(parameters, float(clip))
    gradients = [p.grad for p in parameters if p.grad is not None]
    return torch.nn.utils.get_total_norm(gradients)  # no rescaling pass when not clipping


def check_finite_parameters(parameters: Sequence[Tensor], where: str) -> None:
    """Refuse to save parameters that became NaN/Inf; `where` names the step and what to do."""
    if not all(bool(torch.isfinite(p).all()) for p in parameters):
        raise NonFiniteTrainingError(f"parameters became NaN/Inf {where}")
