"""The training scalars of a run, averaged over a logging window and sent to its loggers."""

from __future__ import annotations

import time

import torch
from torch import Tensor

from vgp_bench.run.loggers import RunLogger

# scalars under train/; the model's and heads' named terms go under train_terms/
MAIN_SCALARS = ("bound", "lr", "grad_norm", "examples_per_s")


def write_training_scalars(
    loggers: RunLogger,
    window_bound: Tensor,
    terms: dict[str, Tensor],
    step_size: float,
    examples_per_s: float,
    step: int,
) -> dict[str, float]:
    """The bound averaged over the logging window, the other terms of the latest step (so the
    loop adds nothing per step but the bound), the step size and the throughput."""
    values = {"bound": float(window_bound)}
    values.update({name: float(value) for name, value in terms.items()})
    values["lr"] = step_size
    values["examples_per_s"] = examples_per_s
    for name, value in values.items():
        prefix = "train" if name in MAIN_SCALARS else "train_terms"
        loggers.log_scalar(f"{prefix}/{name}", value, step)
    return values


class LoggingWindow:
    """The steps since the training scalars were last written: their summed bound (on the
    device, so the loop adds no host sync per step), their count and their examples."""

    def __init__(self, device: torch.device) -> None:
        self.bound_sum = torch.zeros((), device=device)
        self.steps = 0
        self.examples = 0
        self.started = time.perf_counter()

    def add(self, bound: Tensor, examples: int) -> None:
        self.bound_sum += bound
        self.steps += 1
        self.examples += examples

    def write(
        self, loggers: RunLogger, terms: dict[str, Tensor], step_size: float, step: int
    ) -> dict[str, float]:
        """Write the window's scalars (`train/bound`: its mean bound), then start a new one."""
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        window_bound = self.bound_sum / self.steps
        values = write_training_scalars(
            loggers, window_bound, terms, step_size, self.examples / elapsed, step
        )
        self.bound_sum.zero_()
        self.steps, self.examples, self.started = 0, 0, time.perf_counter()
        return values
