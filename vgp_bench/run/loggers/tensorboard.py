"""TensorBoard (logger=tensorboard, the default): event files in the run folder's tensorboard/,
the test result also as its hyperparameters table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from vgp_bench.run.loggers.base import RunLogger

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


def test_numbers(test: dict[str, Any], names: tuple[str, ...] = TEST_METRICS) -> dict[str, float]:
    """The test result's `names` that are numbers (a failed estimate may be absent)."""
    return {
        name: float(test[name])
        for name in names
        if isinstance(test.get(name), int | float) and not isinstance(test.get(name), bool)
    }


class TensorBoardLogger(RunLogger):
    """Scalars, image grids, and the test result as scalars (test/nll, test/bound_nll) and as
    TensorBoard's hyperparameters table (hparam/test_nll, ...)."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, flush_secs: int = 120) -> None:
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), flush_secs=flush_secs)

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def log_image(self, tag: str, grid: Tensor, step: int) -> None:
        self.writer.add_image(tag, grid, step)

    def log_test_result(self, config: dict[str, Any], test: dict[str, Any], step: int) -> None:
        metrics = test_numbers(test)
        for name, value in metrics.items():
            self.writer.add_scalar(f"test/{name}", value, step)
        self.writer.add_hparams(
            hparam_values(config),
            {f"hparam/test_{name}": value for name, value in metrics.items()},
            run_name=".",  # the run's own folder, not a new one per call
            global_step=step,
        )

    def flush(self) -> None:
        self.writer.flush()

    def close(self, status: str = "finished") -> None:
        self.writer.close()
