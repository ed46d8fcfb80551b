"""A study's run folders as the study tests write them: metrics.json records, test
evaluations, per-example files; and the package's read-once records forgotten between tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vgp_bench.studies import runs as study_runs


def forget_records() -> None:
    """Forget the records the package read (each test writes its own folders)."""
    study_runs.load.cache_clear()
    study_runs.valid_curve.cache_clear()


def write_run(
    folder: Path,
    status: str,
    history: list[dict[str, Any]],
    steps_per_epoch: int,
    test: dict[str, Any] | None,
) -> None:
    """A run folder's metrics.json: its status, validation curve and maybe its test."""
    folder.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "status": status,
        "epochs_completed": len(history),
        "steps": steps_per_epoch * len(history),
        "history": history,
    }
    if test is not None:
        record["test"] = test
    (folder / "metrics.json").write_text(json.dumps(record))


def evaluation_record(
    nll: float, standard_errors: tuple[float, float], gap: float, images: int, samples: int
) -> dict[str, Any]:
    """A test evaluation: IS and bound (the bound `gap` nats above) with their errors."""
    return {
        "nll": nll,
        "nll_stderr": standard_errors[0],
        "bound_nll": nll + gap,
        "bound_nll_stderr": standard_errors[1],
        "is_samples": samples,
        "n_examples": images,
        "split": "test",
    }


def run_with_test(
    folder: Path, nll: float, hours: float, per_example_file: str | None = None
) -> None:
    """A finished run of one epoch tested at S = 5000 on 10,000 images, trained for `hours`."""
    test = evaluation_record(nll, (0.25, 0.3), 5.0, 10000, 5000)
    if per_example_file is not None:
        test["per_example_file"] = per_example_file
    write_run(folder, "finished", [{"epoch": 1, "valid_bound": -90.0}], 10, test)
    record = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps({**record, "wall_time_s": 3600 * hours}))


FORMAT_2 = {"format_version": 2, "content_sha256": "c0ffee00" * 8}


def calibration_run(
    folder: Path,
    status: str,
    epochs: int,
    test_nll: float | None,
    planned: int = 3280,
    dataset: dict[str, Any] | None = None,
) -> None:
    """A calibration run folder: its resolved epochs, the data it read (format 2 unless
    `dataset`), a validation curve and maybe its test."""
    history = [
        {"epoch": epoch, "valid_bound": -100.0 + epoch / 10} for epoch in range(1, epochs + 1)
    ]
    history[-1]["valid_bound"] = -99.95  # the last epoch below the best one before it
    test = None if test_nll is None else evaluation_record(test_nll, (0.08, 0.09), 4.0, 10000, 5000)
    write_run(folder, status, history, 10, test)
    record = json.loads((folder / "metrics.json").read_text())
    record["dataset"] = dataset or FORMAT_2
    (folder / "metrics.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(f"seed: 0\ntrainer:\n  epochs: {planned}\n")


def calibration_cells(text: str, run: str) -> list[str]:
    """The cells of a run's row in the calibration table."""
    line = next(line for line in text.splitlines() if line.startswith(f"| `{run}`"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def per_example_file(
    folder: Path,
    name: str,
    nll: list[float],
    bound_nll: list[float] | None = None,
    samples: int = 5000,
) -> None:
    """A per-example file as vgp-eval writes it (log-likelihoods, bounds: 4 nats below the
    log-likelihoods unless given, as -bound)."""
    bound = np.asarray(nll) + 4.0 if bound_nll is None else np.asarray(bound_nll)
    with h5py.File(folder / name, "w") as handle:
        handle.create_dataset("log_likelihood", data=-np.asarray(nll))
        handle.create_dataset("bound", data=-bound)
        handle.attrs["is_samples"] = samples


def draw_run(folder: Path, status: str, epochs: int, test: tuple[float, int, int] | None) -> None:
    """A DRAW run folder: a validation curve and maybe a test (IS, images, S)."""
    history = [{"epoch": e, "valid_bound": -120.0 + e} for e in range(1, epochs + 1)]
    evaluation = None
    if test is not None:
        nll, images, samples = test
        evaluation = evaluation_record(nll, (0.3, 0.4), 6.0, images, samples)
    write_run(folder, status, history, 500, evaluation)
