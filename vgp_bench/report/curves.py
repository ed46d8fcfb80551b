"""Learning curves of every run found (finished or not): the validation bound per epoch."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from vgp_bench.divergence import is_finite_number
from vgp_bench.metrics import read_record
from vgp_bench.plots import line_plot
from vgp_bench.report.rows import MODEL_NAMES
from vgp_bench.report.runs import structure_of


def validation_curves(folders: Sequence[Path]) -> dict[str, list[tuple[float, float]]]:
    """Mean validation bound per epoch for each method (seeds pooled), unfinished runs too."""
    by_label: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        try:
            record = read_record(folder / "metrics.json")
        except (OSError, ValueError):
            continue
        label = f"{MODEL_NAMES.get(str(record.model), record.model)} + "
        label += str(record.inference).upper()
        details = [structure_of(folder, record)]
        details.append(f"K={record.aux_samples}" if record.aux_samples else None)
        shown = [detail for detail in details if detail]
        if shown:
            label += f" ({', '.join(shown)})"
        for entry in record.history or []:
            if is_finite_number(entry.valid_bound):
                by_label[label][int(entry.epoch)].append(float(entry.valid_bound))
    return {
        label: [(epoch, statistics.fmean(values)) for epoch, values in sorted(epochs.items())]
        for label, epochs in sorted(by_label.items())
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
