"""Step-size schedules as multiplicative factors of the base learning rate."""

from __future__ import annotations

from collections.abc import Callable

import torch


def paper_decay(step: int, epsilon: float = 0.01, time_scale: float = 1000.0) -> float:
    """(1 + t / tau)^-(1/2 + epsilon): the paper's 1/t^(1/2+eps) RMSProp decay (Section 5).

    `time_scale` tau delays the decay; tau = 1 gives the paper's form (t + 1)^-(1/2+eps).
    """
    return (1.0 + step / time_scale) ** -(0.5 + epsilon)


def constant(step: int) -> float:
    """No decay."""
    return 1.0


def stage_of_epoch(epoch: int, stages: int, growth: int = 3) -> int:
    """The stage (0-based) that `epoch` (0-based) falls in when stage i lasts growth^i epochs;
    epochs past the last stage stay in it."""
    stage, stage_end = 0, 1
    while epoch >= stage_end and stage < stages - 1:
        stage += 1
        stage_end += growth**stage
    return stage


def burda_stages(
    step: int, steps_per_epoch: int, stages: int = 8, growth: int = 3, decay_stages: int = 7
) -> float:
    """round(10^(1 - i / 7), 1) in stage i of 3^i epochs (i = 0..7, 3280 epochs in all): the
    staged step sizes of Burda et al. (2016), 1e-4 times this factor (10, 7.2, 5.2, ..., 1).

    `steps_per_epoch` is filled in by the runner from the training split and batch size.
    """
    stage = stage_of_epoch(step // steps_per_epoch, stages, growth)
    return round(10.0 ** (1.0 - stage / decay_stages), 1)


class StepSizeSchedule:
    """Sets each parameter group's step size to base * factor(t) before update t.

    A plain assignment per step (torch's LambdaLR costs ~80 us a step on small models); the
    only state is the update count, which the trainer already checkpoints.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, factor: Callable[[int], float]) -> None:
        self.optimizer = optimizer
        self.factor = factor
        self.base_step_sizes = [float(group["lr"]) for group in optimizer.param_groups]
        self.apply(0)

    def apply(self, step: int) -> None:
        """Set the step sizes for update number `step` (0-based)."""
        scale = self.factor(step)
        for group, base in zip(self.optimizer.param_groups, self.base_step_sizes, strict=True):
            group["lr"] = base * scale

    def current(self) -> float:
        """The step size of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"])
