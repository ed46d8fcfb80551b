"""Learning curves of every run found (finished or not): the validation bound per epoch."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from vgp_bench.divergence import is_finite_number
from vgp_bench.metrics import read_record
from vgp_bench.plots import line_plot
from vgp_bench.report.rows import (
    Setting,
    distinguishing_suffixes,
    method_label,
    setting_of,
    sort_key,
)
from vgp_bench.report.runs import Run, read_config


def validation_curves(folders: Sequence[Path]) -> dict[str, list[tuple[float, float]]]:
    """Mean validation bound per epoch for each method (seeds pooled), unfinished runs too.

    Runs are grouped and named as the tables name their rows (family, structure, objectives,
    and the config keys that tell apart runs of one name), so a curve pools seeds only.
    """
    histories: dict[Setting, list[list[tuple[int, float]]]] = defaultdict(list)
    for folder in folders:
        try:
            metrics = read_record(folder / "metrics.json").data
            config = read_config(folder)
        except (OSError, ValueError):
            continue
        run = Run(folder, {**metrics, "test": metrics.get("test") or {}}, config)
        history = [
            (int(entry.epoch), float(entry.valid_bound))
            for entry in run.record.history or []
            if is_finite_number(entry.valid_bound)
        ]
        histories[setting_of(run)].append(history)
    # unfinished runs have no test evaluation yet: group them with their finished seeds
    by_label: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    settings = {replace(setting, is_samples=0, test_examples=0) for setting in histories}
    suffixes = distinguishing_suffixes(sorted(settings, key=sort_key), table2=False)
    for setting, runs in histories.items():
        untested = replace(setting, is_samples=0, test_examples=0)
        label = method_label(untested, table2=False) + suffixes[untested]
        for history in runs:
            for epoch, value in history:
                by_label[label][epoch].append(value)
    return {
        label: [(epoch, statistics.fmean(values)) for epoch, values in sorted(epochs.items())]
        for label, epochs in sorted(by_label.items())
        if epochs
    }


def write_curves(folders: Sequence[Path], path: Path, skip_epochs: int = 5) -> int:
    """PNG of the validation curves; the y axis fits the epochs after the first `skip_epochs`."""
    series = validation_curves(folders)
    if not series:
        return 0
    late = [y for values in series.values() for x, y in values if x > skip_epochs]
    late = late or [y for values in series.values() for _, y in values]
    margin = 0.05 * (max(late) - min(late) or 1.0)
    line_plot(
        series,
        path,
        "Validation bound per epoch (mean over seeds)",
        "epoch",
        "validation bound (nats, higher is better)",
        y_range=(min(late) - margin, max(late) + margin),
    )
    return len(series)
