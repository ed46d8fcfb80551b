"""The sinks a run's `logger` config chooses (configs/logger/), opened in its folder."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vgp_bench.errors import ConfigError
from vgp_bench.run.loggers.base import Loggers, RunLogger, describe, say

LOGGER_NAMES = ("tensorboard", "csv", "mlflow")  # configs/logger/<name>.yaml


def check_logger_choice(chosen: Mapping[str, Any] | None) -> None:
    """Refuse an unknown sink, and mlflow where MLflow is not installed (one line each)."""
    for name in chosen or {}:
        if name not in LOGGER_NAMES:
            raise ConfigError(f"logger.{name}: no such logger; choose from {list(LOGGER_NAMES)}")
    if "mlflow" in (chosen or {}) and importlib.util.find_spec("mlflow") is None:
        raise ConfigError(
            "logger=mlflow needs MLflow, which is not installed: pip install -e '.[mlflow]' "
            "(or choose logger=tensorboard or logger=csv)"
        )


def open_logger(
    name: str, options: dict[str, Any], run_dir: Path, config: dict[str, Any], step: int
) -> RunLogger:
    """One sink, opened for a run that starts (or resumes) at `step`."""
    if name == "tensorboard":
        from vgp_bench.run.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(run_dir, int(options.get("flush_secs", 120)))
    if name == "csv":
        from vgp_bench.run.loggers.csv_log import CsvLogger

        return CsvLogger(run_dir / str(options.get("file", "metrics.csv")), step)
    from vgp_bench.run.loggers.mlflow_log import MlflowLogger

    return MlflowLogger(run_dir, config, **options)


def build_loggers(
    chosen: Mapping[str, Any] | None,
    run_dir: Path,
    config: dict[str, Any],
    step: int,
    log: logging.Logger,
) -> Loggers:
    """Every chosen sink; one that cannot open (a server down) is left out with one warning."""
    sinks: list[RunLogger] = []
    for name, options in (chosen or {}).items():
        try:
            sinks.append(open_logger(name, dict(options or {}), run_dir, config, step))
        except Exception as error:
            say(
                log,
                f"logger {name} could not start ({describe(error)}); the run goes on without it",
            )
    return Loggers(sinks, log)
