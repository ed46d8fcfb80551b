#!/usr/bin/env python
"""Where each run of a study stands, from its metrics.json: a markdown table for the study's
README while runs are still training (the finished rows' numbers are vgp-report's table).

    python scripts/study_progress.py RUNS_DIR [--epochs E1,E2,...] [--window W] > progress.md

The status table's "best gain" is how much the best validation bound rose over the last W
epochs (default 50): the early-stopping studies stop a run once it stays below their
min_delta for their patience of W epochs.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def load_runs(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(name, metrics) of every `<folder>/<run>/metrics.json`, by name."""
    runs = []
    for path in sorted(folder.glob("*/metrics.json")):
        runs.append((path.parent.name, json.loads(path.read_text())))
    return runs


def number(value: Any, digits: int = 2) -> str:
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{value:.{digits}f}"
    return "—"


def best_valid(history: list[dict[str, Any]]) -> tuple[float | None, int | None]:
    bounds = [(entry["valid_bound"], entry["epoch"]) for entry in history if "valid_bound" in entry]
    if not bounds:
        return None, None
    bound, epoch = max(bounds)
    return bound, epoch


def best_gain(history: list[dict[str, Any]], window: int) -> float | None:
    """How much the best validation bound rose over the last `window` epochs (None before
    there are that many)."""
    bounds = [entry["valid_bound"] for entry in history if "valid_bound" in entry]
    if len(bounds) <= window:
        return None
    return max(bounds) - max(bounds[:-window])


def status_table(runs: list[tuple[str, dict[str, Any]]], window: int = 50) -> list[str]:
    lines = [
        "| run | status | epochs | steps | hours | latest valid bound | best valid bound "
        f"(epoch) | best gain, last {window} epochs | stop | test -log p(x) / -bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
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
        lines.append(
            f"| {name} | {metrics.get('status')} | {metrics.get('epochs_completed')} | "
            f"{metrics.get('steps')} | {number((metrics.get('wall_time_s') or 0) / 3600, 1)} | "
            f"{number(latest)} | {number(best)} ({epoch}) | {number(best_gain(history, window))} | "
            f"{metrics.get('stop_reason') or '—'} | "
            f"{tested} |"
        )
    return lines


def curve_table(runs: list[tuple[str, dict[str, Any]]], epochs: list[int]) -> list[str]:
    """The validation bound of each run at the given epochs."""
    lines = ["| run | " + " | ".join(str(e) for e in epochs) + " |"]
    lines.append("|---|" + "---|" * len(epochs))
    for name, metrics in runs:
        by_epoch = {e["epoch"]: e.get("valid_bound") for e in metrics.get("history") or []}
        lines.append(f"| {name} | " + " | ".join(number(by_epoch.get(e)) for e in epochs) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a folder of run folders (each with metrics.json)")
    parser.add_argument(
        "--epochs", default="1,4,13,40,121,364,1093,3280",
        help="comma-separated epochs for the validation-bound table",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=int, default=50, help="epochs over which the best bound's gain is shown"
    )
    args = parser.parse_args()
    runs = load_runs(args.runs)
    epochs = [int(e) for e in args.epochs.split(",") if e]
    print("\n".join(status_table(runs, args.window)))
    print()
    print("Validation bound (nats, higher is better) after epoch:")
    print()
    print("\n".join(curve_table(runs, epochs)))


if __name__ == "__main__":
    main()
