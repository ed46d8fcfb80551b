"""CSV (logger=csv): every scalar of the run in one file of the run folder, a row per step and a
column per metric, rewritten whole (atomically) at the end of each epoch and at the end."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from vgp_bench.files import atomic_write_text
from vgp_bench.run.loggers.base import RunLogger
from vgp_bench.run.loggers.tensorboard import test_numbers

TEST_COLUMNS = ("nll", "nll_stderr", "bound_nll", "bound_nll_stderr")


class CsvLogger(RunLogger):
    """Rows by step, columns `step` then the metrics in the order first seen; a resumed run
    keeps the rows up to the step it resumes from (later ones were never checkpointed)."""

    name = "csv"

    def __init__(self, path: Path, start_step: int = 0) -> None:
        self.path = path
        self.rows: dict[int, dict[str, float]] = defaultdict(dict)
        self.columns: list[str] = []
        if start_step and path.is_file():
            self.read_back(start_step)

    def read_back(self, start_step: int) -> None:
        """The rows an earlier attempt wrote up to `start_step`."""
        with self.path.open(newline="") as file:
            for line in csv.DictReader(file):
                step = int(line.pop("step"))
                for column, text in line.items():
                    if column not in self.columns:
                        self.columns.append(column)
                    if text not in ("", None) and step <= start_step:
                        self.rows[step][column] = float(text)

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        if tag not in self.columns:
            self.columns.append(tag)
        self.rows[step][tag] = float(value)

    def log_test_result(self, config: dict[str, Any], test: dict[str, Any], step: int) -> None:
        for name, value in test_numbers(test, TEST_COLUMNS).items():
            self.log_scalar(f"test/{name}", value, step)
        self.flush()

    def text(self) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, ["step", *self.columns], lineterminator="\n")
        writer.writeheader()
        for step in sorted(self.rows):
            writer.writerow({"step": step, **{k: repr(v) for k, v in self.rows[step].items()}})
        return buffer.getvalue()

    def flush(self) -> None:
        if self.rows:
            atomic_write_text(self.path, self.text())

    def close(self, status: str = "finished") -> None:
        self.flush()
