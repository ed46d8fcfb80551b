"""Learning curves of every run found (finished or not): the validation bound per epoch."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from matplotlib.figure import Figure

from vgp_bench.analysis.report.paper import TABLE1_DATASET
from vgp_bench.analysis.report.rows import (
    Setting,
    distinguishing_suffixes,
    method_label,
    setting_of,
    sort_key,
)
from vgp_bench.analysis.report.runs import Run, is_lost_snapshot, read_config
from vgp_bench.catalog import option
from vgp_bench.divergence import is_finite_number
from vgp_bench.figures.drawing import Style, curves_figure, distinct_styles, save_figure
from vgp_bench.run.folder.metrics import read_record

Curve = list[tuple[float, float]]
# Keys that only say where a trajectory stops or which of its checkpoints is tested: runs that
# differ in them alone follow one curve (a resume may change them)
TRAJECTORY_NEUTRAL_KEYS = (
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.early_stopping.patience",
    "eval.checkpoint",
)


def curve_setting(setting: Setting) -> Setting:
    """The setting without what tells apart only evaluations or lengths of one trajectory."""
    config = tuple(
        (key, value)
        for key, value in setting.config
        if not any(key == k or key.startswith(k + ".") for k in TRAJECTORY_NEUTRAL_KEYS)
    )
    return replace(setting, is_samples=0, test_examples=0, config=config)


def panel_name(setting: Setting) -> str:
    """The panel a row's curve is drawn in: its model (and data set, unless MNIST)."""
    name = option("model", setting.model).label
    shown = setting.dataset not in (TABLE1_DATASET, "unknown")
    return f"{name}, {setting.dataset}" if shown else name


def curve_panels(folders: Sequence[Path]) -> dict[str, dict[str, Curve]]:
    """Mean validation bound per epoch, by panel (model) and row label (seeds pooled).

    Runs are grouped and named as the tables name their rows; runs that differ only in how
    long they trained (or which checkpoint was tested) share a curve, and of several runs of
    one setting and seed the longest history counts once. Unfinished runs are included, the
    kept snapshots of lost runs are not.
    """
    histories: dict[Setting, dict[int, list[tuple[int, float]]]] = defaultdict(dict)
    for folder in folders:
        if is_lost_snapshot(folder.name):
            continue
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
        seeds = histories[curve_setting(setting_of(run))]
        seed = int(metrics.get("seed") or 0)
        if len(history) > len(seeds.get(seed, [])):
            seeds[seed] = history
    settings = sorted(histories, key=sort_key)
    suffixes = distinguishing_suffixes(settings, table2=False)
    panels: dict[str, dict[str, Curve]] = defaultdict(dict)
    for setting in settings:
        by_epoch: dict[int, list[float]] = defaultdict(list)
        for history in histories[setting].values():
            for epoch, value in history:
                by_epoch[epoch].append(value)
        if by_epoch:
            label = method_label(setting, table2=False) + suffixes[setting]
            panels[panel_name(setting)][label] = [
                (epoch, statistics.fmean(values)) for epoch, values in sorted(by_epoch.items())
            ]
    return dict(panels)


def validation_curves(folders: Sequence[Path]) -> dict[str, Curve]:
    """Every curve of `curve_panels`, by row label, sorted by label."""
    curves = {
        label: curve for panel in curve_panels(folders).values() for label, curve in panel.items()
    }
    return dict(sorted(curves.items()))


def row_styles(panels: dict[str, dict[str, Curve]]) -> dict[str, Style]:
    """A distinct (colour, line style) per row; a row of one family looks the same in every
    panel."""
    family = {label: label.split(" + ", 1)[-1] for series in panels.values() for label in series}
    styles = distinct_styles(list(dict.fromkeys(family.values())))
    return {label: styles[name] for label, name in family.items()}


def fitted_range(series: dict[str, Curve], skip_epochs: int) -> tuple[tuple[float, float], int]:
    """The y range of a panel: the values after the first `skip_epochs` epochs of every curve
    but those that stay below where all the others end by more than the others' own range
    (a run that never trained); returns the range and how many curves were left out."""
    late = {
        label: [y for x, y in values if x > skip_epochs] or [y for _, y in values]
        for label, values in series.items()
    }
    kept = dict(late)
    for label, values in late.items():
        others = [values for other, values in late.items() if other != label]
        if not others:
            continue
        finals = [values[-1] for values in others]
        spread = max(max(v) for v in others) - min(min(v) for v in others)
        if max(values) < min(finals) - spread:
            del kept[label]
    values = [y for ys in kept.values() for y in ys]
    margin = 0.05 * (max(values) - min(values) or 1.0)
    return (min(values) - margin, max(values) + margin), len(late) - len(kept)


def curves_of(folders: Sequence[Path], skip_epochs: int = 5) -> Figure | None:
    """The validation curves as a figure: a panel per model, a distinct colour and line style
    per row; each panel's y axis fits the epochs after the first `skip_epochs` (values off it
    sit on its edge). None when no run has a validation history."""
    panels = curve_panels(folders)
    if not panels:
        return None
    titled, y_ranges = {}, {}
    for name, series in panels.items():
        y_range, below = fitted_range(series, skip_epochs)
        title = f"{name} ({below} below the axis, drawn on its edge)" if below else name
        titled[title], y_ranges[title] = series, y_range
    return curves_figure(
        titled,
        "Validation bound per epoch (mean over seeds; a panel per model)",
        "epoch",
        "validation bound (nats, higher is better)",
        styles=row_styles(panels),
        y_ranges=y_ranges,
    )


def write_curves(folders: Sequence[Path], path: Path, skip_epochs: int = 5) -> int:
    """The validation curves (`curves_of`) as `<path stem>.png` and `.pdf`; the number of
    curves (0: nothing written)."""
    figure = curves_of(folders, skip_epochs)
    if figure is None:
        return 0
    save_figure(figure, path)
    return sum(len(axis.get_lines()) for axis in figure.axes)
