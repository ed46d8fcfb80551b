"""The interface every sink of a run implements (`RunLogger`), and `Loggers`, which sends each
call to every sink and drops a sink that fails, saying so in one line, so that a tracker down
or a disk full never stops or corrupts training."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


def describe(error: BaseException) -> str:
    """`Type: message` on one line, cut to 300 characters."""
    return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def say(log: logging.Logger, message: str) -> None:
    """One warning line, in the run's train.log and on stderr."""
    log.warning("%s", message)
    print(f"vgp-train: {message}", file=sys.stderr)


class RunLogger:
    """One sink: each call records something the run has; the base records nothing (the
    stand-in on ranks other than 0, and what a sink does with what it cannot show)."""

    name = "none"

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        """A scalar such as `train/bound` or `valid/bound` at an update step."""

    def log_image(self, tag: str, grid: Tensor, step: int) -> None:
        """An image grid `[C, H, W]` in [0, 1] at a step."""

    def log_test_result(self, config: dict[str, Any], test: dict[str, Any], step: int) -> None:
        """The final test evaluation (metrics.json's `test`) with the run's resolved config."""

    def log_figures(self, paths: Sequence[Path]) -> None:
        """Figure files the run has written (PNG and PDF)."""

    def flush(self) -> None:
        """Send what is buffered (at the end of each epoch and at the end)."""

    def close(self, status: str = "finished") -> None:
        """Flush and release the sink; `status` is metrics.json's (finished, interrupted,
        failed)."""


class Loggers(RunLogger):
    """Every chosen sink; a sink whose call raises is dropped with one warning naming it and
    the error, and the run goes on with the others (its folder is written without them)."""

    name = "loggers"

    def __init__(self, sinks: Sequence[RunLogger], log: logging.Logger | None = None) -> None:
        self.sinks = list(sinks)
        self.log = log or logging.getLogger("vgp_bench.run")

    def _each(self, call: Callable[[RunLogger], None]) -> None:
        for sink in list(self.sinks):
            try:
                call(sink)
            except Exception as error:  # any failure of a sink: drop it, go on
                self.drop(sink, error)

    def drop(self, sink: RunLogger, error: BaseException) -> None:
        """Stop sending to `sink` and say so in one line (training goes on)."""
        self.sinks.remove(sink)
        say(
            self.log,
            f"logger {sink.name} failed ({describe(error)}); the run goes on without it (its "
            "folder is complete)",
        )
        with contextlib.suppress(Exception):  # dropped already; its close may fail too
            sink.close()

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        self._each(lambda sink: sink.log_scalar(tag, value, step))

    def log_image(self, tag: str, grid: Tensor, step: int) -> None:
        self._each(lambda sink: sink.log_image(tag, grid, step))

    def log_test_result(self, config: dict[str, Any], test: dict[str, Any], step: int) -> None:
        self._each(lambda sink: sink.log_test_result(config, test, step))

    def log_figures(self, paths: Sequence[Path]) -> None:
        self._each(lambda sink: sink.log_figures(paths))

    def flush(self) -> None:
        self._each(lambda sink: sink.flush())

    def close(self, status: str = "finished") -> None:
        for sink in list(self.sinks):
            try:
                sink.close(status)
            except Exception as error:
                self.drop(sink, error)
        self.sinks = []
