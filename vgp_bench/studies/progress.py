"""Where each run of a study stands, from its metrics.json: a markdown table for the study's
README while runs are still training (the finished rows' numbers are vgp-report's table).

    python scripts/study_progress.py RUNS_DIR [--epochs E1,E2,...]
        [--early-stopping PATIENCE,MIN_DELTA] > progress.md

With --early-stopping (a study whose runs stop early), the status table says how many epochs
in a row each run has gone without gaining MIN_DELTA over the bound of its last gain, out of
PATIENCE: the trainer's own rule (vgp_bench/run/loop/early_stopping.py), replayed on the run's
validation curve.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from vgp_bench.analysis.markdown import markdown_table
from vgp_bench.analysis.report.runs import is_lost_snapshot
from vgp_bench.run.folder.checkpoint import RunState
from vgp_bench.run.loop.early_stopping import EarlyStopping


def load_runs(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(name, metrics) of every `<folder>/<run>/metrics.json`, by name."""
    runs = []
    for path in sorted(folder.glob("*/metrics.json")):
        runs.append((path.parent.name, json.loads(path.read_text())))
    return runs


def number(value: Any, digits: int = 2) -> str:
    """A finite number with `digits` decimals, else —."""
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.{digits}f}"
    return "—"


def best_valid(history: list[dict[str, Any]]) -> tuple[float | None, int | None]:
    """The best validation bound of a history and its epoch (None, None without one)."""
    bounds = [(entry["valid_bound"], entry["epoch"]) for entry in history if "valid_bound" in entry]
    if not bounds:
        return None, None
    bound, epoch = max(bounds)
    return bound, epoch


def epochs_without_gain(history: list[dict[str, Any]], min_delta: float) -> int:
    """Epochs in a row, up to the last, whose validation bound did not beat the bound of the
    last epoch that gained by more than `min_delta` (trainer.early_stopping's counter)."""
    state = RunState()
    rule = EarlyStopping(patience=None, min_delta=min_delta)
    for entry in history:
        bound = entry.get("valid_bound")
        rule.observe(state, math.nan if bound is None else float(bound))
    return state.epochs_without_gain


def status_table(
    runs: list[tuple[str, dict[str, Any]]], early_stopping: tuple[int, float] | None = None
) -> str:
    """A row per run: its status, epochs, steps, hours, validation bounds, where its early
    stopping stands (with `early_stopping` = (patience, min_delta)) and its test."""
    stopping = (
        [f"epochs without a gain of {early_stopping[1]:g} (of {early_stopping[0]})"]
        if early_stopping
        else []
    )
    header = [
        "run", "status", "epochs", "steps", "hours", "latest valid bound",
        "best valid bound (epoch)", *stopping, "stop", "test -log p(x) / -bound",
    ]  # fmt: skip
    rows = []
    for name, metrics in runs:
        history = metrics.get("history") or []
        latest = history[-1].get("valid_bound") if history else None
        best, epoch = best_valid(history)
        test = metrics.get("test") or {}
        tested = (
            f"{number(test.get('nll'))} / {number(test.get('bound_nll'))} "
            f"(S = {test.get('is_samples')}, {test.get('n_examples')} images)"
            if test
            else "—"
        )
        counter = [str(epochs_without_gain(history, early_stopping[1]))] if early_stopping else []
        status = "lost (snapshot)" if is_lost_snapshot(name) else str(metrics.get("status"))
        cells = [
            name, status, str(metrics.get("epochs_completed")),
            str(metrics.get("steps")), number((metrics.get("wall_time_s") or 0) / 3600, 1),
            number(latest), f"{number(best)} ({epoch})", *counter,
            metrics.get("stop_reason") or "—", tested,
        ]  # fmt: skip
        rows.append(cells)
    return markdown_table(header, rows)


def curve_table(runs: list[tuple[str, dict[str, Any]]], epochs: list[int]) -> str:
    """The validation bound of each run at the given epochs."""
    rows = []
    for name, metrics in runs:
        by_epoch = {e["epoch"]: e.get("valid_bound") for e in metrics.get("history") or []}
        rows.append([name, *(number(by_epoch.get(e)) for e in epochs)])
    return markdown_table(["run", *map(str, epochs)], rows)


def main(argv: list[str] | None = None) -> None:
    """Print a study's status and validation-bound tables (the CLI above)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a folder of run folders (each with metrics.json)")
    parser.add_argument(
        "--epochs", default="1,4,13,40,121,364,1093,3280",
        help="comma-separated epochs for the validation-bound table",
    )  # fmt: skip
    parser.add_argument(
        "--early-stopping", metavar="PATIENCE,MIN_DELTA",
        help="the study's trainer.early_stopping: show each run's epochs without a gain",
    )  # fmt: skip
    args = parser.parse_args(argv)
    runs = load_runs(args.runs)
    epochs = [int(e) for e in args.epochs.split(",") if e]
    early_stopping = None
    if args.early_stopping:
        patience, min_delta = args.early_stopping.split(",")
        early_stopping = (int(patience), float(min_delta))
    print(status_table(runs, early_stopping), end="")
    print()
    print("Validation bound (nats, higher is better) after epoch:")
    print()
    print(curve_table(runs, epochs), end="")
