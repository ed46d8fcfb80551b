"""The `logger` group (vgp_bench/run/loggers/): a sink that fails never stops or corrupts
training, the CSV sink's columns and its resume, the choice refused in one line. The MLflow
sink against a real tracking server is tests/test_mlflow.py."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest

from tests.helpers import TINY, compose_config
from vgp_bench.errors import ConfigError
from vgp_bench.run.commands.train import train
from vgp_bench.run.loggers import Loggers, RunLogger, check_logger_choice
from vgp_bench.run.loggers.csv_log import CsvLogger


class Recording(RunLogger):
    """Keeps every scalar it is sent."""

    name = "recording"

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.closed_with: str | None = None

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def close(self, status: str = "finished") -> None:
        self.closed_with = status


class Broken(RunLogger):
    """Fails on its second scalar, as a tracker that goes down mid-run."""

    name = "broken"

    def __init__(self) -> None:
        self.calls = 0

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        self.calls += 1
        if self.calls == 2:
            raise ConnectionError("tracking server\nunreachable")


def test_a_failing_sink_is_dropped_with_one_line_and_the_others_go_on(caplog, capsys) -> None:
    recording, broken = Recording(), Broken()
    loggers = Loggers([broken, recording], logging.getLogger("test.loggers"))
    with caplog.at_level(logging.WARNING, logger="test.loggers"):
        for step in range(1, 4):
            loggers.log_scalar("train/bound", -float(step), step)
    assert recording.scalars == [("train/bound", -1.0, 1), ("train/bound", -2.0, 2),
                                 ("train/bound", -3.0, 3)]  # fmt: skip
    assert broken.calls == 2 and loggers.sinks == [recording]
    (warning,) = caplog.messages
    assert "logger broken failed (ConnectionError: tracking server unreachable)" in warning
    assert "\n" not in warning
    assert capsys.readouterr().err == f"vgp-train: {warning}\n"
    loggers.close("interrupted")
    assert recording.closed_with == "interrupted" and loggers.sinks == []


def test_the_csv_sink_has_a_column_per_metric_and_a_resume_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    sink = CsvLogger(path)
    sink.log_scalar("train/bound", -3.5, 2)
    sink.log_scalar("train/bound", -3.0, 4)
    sink.log_scalar("valid/bound", -3.25, 4)
    sink.log_scalar("train/bound", -2.5, 6)  # after the last checkpoint: a resume drops it
    sink.close()
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["step", "train/bound", "valid/bound"]
    assert [(r["step"], r["train/bound"], r["valid/bound"]) for r in rows] == [
        ("2", "-3.5", ""), ("4", "-3.0", "-3.25"), ("6", "-2.5", "")
    ]  # fmt: skip
    resumed = CsvLogger(path, start_step=4)
    resumed.log_scalar("train/bound", -2.0, 6)
    resumed.log_test_result({}, {"nll": 2.0, "nll_stderr": 0.1, "bound_nll": "n/a"}, 6)
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["step"], r["train/bound"]) for r in rows] == [("2", "-3.5"), ("4", "-3.0"),
                                                              ("6", "-2.0")]  # fmt: skip
    assert (rows[-1]["test/nll"], rows[-1]["test/nll_stderr"]) == ("2.0", "0.1")
    assert "test/bound_nll" not in rows[-1]


def test_training_logs_to_csv_and_tensorboard_and_a_broken_csv_sink_never_stops_it(
    tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    metrics = train(compose_config([*TINY, "logger=[tensorboard,csv]"]), run_dir)
    assert metrics["status"] == "finished" and any((run_dir / "tensorboard").iterdir())
    with (run_dir / "metrics.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    valid = [(int(r["step"]), float(r["valid/bound"])) for r in rows if r["valid/bound"]]
    assert valid == [(entry["step"], entry["valid_bound"]) for entry in metrics["history"]]
    assert float(rows[-1]["test/nll"]) == metrics["test"]["nll"]
    # a sink whose file cannot be written (its folder is a file): one line, the run finishes
    broken = tmp_path / "broken"
    (tmp_path / "not_a_folder").write_text("")
    overrides = [*TINY, "logger=[csv]", f"logger.csv.file={tmp_path / 'not_a_folder' / 'm.csv'}"]
    capsys.readouterr()
    metrics = train(compose_config(overrides), broken)
    assert metrics["status"] == "finished" and metrics["test"]["nll"] > 0
    said = [line for line in capsys.readouterr().err.splitlines() if "logger csv" in line]
    assert len(said) == 1 and said[0].startswith("vgp-train: logger csv failed (")
    assert said[0].removeprefix("vgp-train: ") in (broken / "train.log").read_text()
    assert json.loads((broken / "metrics.json").read_text())["status"] == "finished"
    assert (broken / "samples.png").is_file() and (broken / "samples.pdf").is_file()


def test_an_unknown_logger_or_mlflow_without_mlflow_is_refused_in_one_line(monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"logger.wandb: no such logger; choose from"):
        check_logger_choice({"wandb": {}})
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[mlflow\]'"):
        check_logger_choice({"tensorboard": {}, "mlflow": {}})
    check_logger_choice({"tensorboard": {}, "csv": {}})  # the core install's sinks
