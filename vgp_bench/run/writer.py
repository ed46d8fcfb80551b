"""TensorBoard for a run: the training scalars, a stand-in writer for ranks other than 0."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

# scalars under train/; the model's and heads' named terms go under train_terms/
MAIN_SCALARS = ("bound", "lr", "grad_norm", "examples_per_s")


class NullWriter:
    """Stands in for TensorBoard on ranks other than 0."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None: ...

    def add_image(self, *args: Any, **kwargs: Any) -> None: ...

    def add_hparams(self, *args: Any, **kwargs: Any) -> None: ...

    def close(self) -> None: ...


Writer = SummaryWriter | NullWriter
TEST_METRICS = ("nll", "bound_nll")  # the test result's numbers TensorBoard shows


def hparam_values(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config's leaves as TensorBoard hyperparameters (numbers, text and flags; the rest as
    text)."""
    values: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            values.update(hparam_values(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            values[name] = value
        else:
            values[name] = str(value)
    return values


def write_test_result(
    writer: Writer, config: dict[str, Any], test: dict[str, Any], step: int
) -> None:
    """The test result as scalars (test/nll, test/bound_nll) and, with the run's config, as
    TensorBoard's hyperparameters table (hparam/test_nll, ...)."""
    metrics = {
        name: float(test[name]) for name in TEST_METRICS if isinstance(test.get(name), int | float)
    }
    for name, value in metrics.items():
        writer.add_scalar(f"test/{name}", value, step)
    writer.add_hparams(
        hparam_values(config),
        {f"hparam/test_{name}": value for name, value in metrics.items()},
        run_name=".",  # the run's own folder, not a new one per call
        global_step=step,
    )


def write_training_scalars(
    writer: Writer,
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
        writer.add_scalar(f"{prefix}/{name}", value, step)
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
        self, writer: Writer, terms: dict[str, Tensor], step_size: float, step: int
    ) -> dict[str, float]:
        """Write the window's scalars (`train/bound`: its mean bound), then start a new one."""
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        window_bound = self.bound_sum / self.steps
        values = write_training_scalars(
            writer, window_bound, terms, step_size, self.examples / elapsed, step
        )
        self.bound_sum.zero_()
        self.steps, self.examples, self.started = 0, 0, time.perf_counter()
        return values
