"""Figures with matplotlib: panels of learning curves and image grids, each saved by one call as
PNG (for the READMEs) and PDF (vector, for papers).

Figures are built on matplotlib's object interface (`Figure`, never pyplot) on the
non-interactive Agg canvas, so nothing here touches the global backend or opens a window.
Imports neither torch nor Hydra (the report uses it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vgp_bench.files import atomic_file

Points = Sequence[tuple[float, float]]
FORMATS = ("png", "pdf")  # every figure, in both
PNG_DPI = 150
TITLE_CHARACTERS_PER_INCH = 14  # a title line of an image grid, in matplotlib's small font

# matplotlib's tab10 and four dash patterns (solid, dashed, dotted, dash-dot)
COLOURS = (
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#000000", "#ffbb78",
)  # fmt: skip
LINE_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Style:
    """How one series is drawn: its colour and its matplotlib line style."""

    colour: str
    line_style: str


def distinct_styles(labels: Sequence[str]) -> dict[str, Style]:
    """A (colour, line style) pair per label, no two alike; neighbours differ in both for 12
    labels."""
    styles = {}
    for index, label in enumerate(labels):
        colour = COLOURS[index % len(COLOURS)]
        line_style = LINE_STYLES[(index + index // len(COLOURS)) % len(LINE_STYLES)]
        styles[label] = Style(colour, line_style)
    return styles


def new_figure(**options: Any) -> Figure:
    """A figure on the non-interactive Agg canvas (PDFs are drawn by matplotlib's PDF canvas)."""
    figure = Figure(**options)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path: str | Path) -> list[Path]:
    """Write `figure` as `<path stem>.png` and `.pdf` (each atomically: a link there is
    replaced, never written through); the paths written."""
    written = []
    for suffix in FORMATS:
        target = Path(path).with_suffix(f".{suffix}")
        with atomic_file(target) as temporary:
            figure.savefig(temporary, format=suffix, dpi=PNG_DPI, metadata=metadata(suffix))
        written.append(target)
    return written


def metadata(suffix: str) -> dict[str, str | None]:
    """File metadata without a creation date, so that a figure redrawn from the same data is
    the same file."""
    return {"CreationDate": None} if suffix == "pdf" else {"Software": "vgp-bench (matplotlib)"}


def curves_figure(
    panels: Mapping[str, Mapping[str, Points]],
    title: str,
    x_label: str,
    y_label: str,
    styles: Mapping[str, Style] | None = None,
    y_ranges: Mapping[str, tuple[float, float]] | None = None,
) -> Figure:
    """Panels stacked one above the other (title -> {label -> [(x, y), ...]}), sharing the x
    axis; each fits its own y range unless `y_ranges` gives it, and a value off that range is
    drawn on its edge. Series keep their style (by label) across panels; a legend beside each
    panel."""
    points = [p for series in panels.values() for values in series.values() for p in values]
    if not points:
        raise ValueError("curves_figure: no points to draw")
    labels = list(dict.fromkeys(label for series in panels.values() for label in series))
    styles = styles or distinct_styles(labels)
    figure = new_figure(figsize=(10, 0.6 + 3.6 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for axis, (name, series) in zip(axes, panels.items()):
        low, high = (y_ranges or {}).get(name, (None, None))
        for label, values in series.items():
            xs, ys = zip(*sorted(values))
            if low is not None and high is not None:
                ys = tuple(min(max(y, low), high) for y in ys)
            style = styles[label]
            axis.plot(
                xs, ys, color=style.colour, linestyle=style.line_style, linewidth=1.6,
                marker="o" if len(xs) == 1 else None, label=label,
            )  # fmt: skip
        if low is not None and high is not None:
            axis.set_ylim(low, high)
        axis.set_title(name, loc="left", fontsize="medium")
        axis.set_ylabel(y_label)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    axes[-1].set_xlabel(x_label)
    figure.suptitle(title)
    return figure


def image_grid_figure(grid: np.ndarray, title: str, pixel_scale: float = 2.0) -> Figure:
    """An image grid (`[H, W]` grey or `[H, W, 3]` colour, values in [0, 1]) drawn pixel for
    pixel (`pixel_scale` figure pixels each in the PNG), with its title wrapped to the
    figure's width, and no axes."""
    height, width = grid.shape[:2]
    inches = pixel_scale / PNG_DPI
    figure_width = max(width * inches, 3.0)
    lines = textwrap.wrap(title, max(20, int(figure_width * TITLE_CHARACTERS_PER_INCH)))
    figure = new_figure(
        figsize=(figure_width, height * inches + 0.25 + 0.18 * len(lines)), layout="constrained"
    )
    axis = figure.subplots()
    axis.imshow(grid, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    axis.set_axis_off()
    axis.set_title("\n".join(lines), fontsize="small")
    return figure


def density_panels_figure(
    panels: Mapping[str, np.ndarray], extent: tuple[float, float, float, float]
) -> Figure:
    """Heat maps side by side (`[G, G]` non-negative values, row 0 at the top), each scaled by
    its own maximum and drawn over `extent` (left, right, bottom, top); a title's fields,
    separated by double spaces, go under its first on a second line."""
    figure = new_figure(figsize=(2.9 * len(panels), 3.4), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for axis, (title, values) in zip(axes, panels.items()):
        peak = float(values.max())
        scaled = values / peak if peak > 0 else np.zeros_like(values)
        axis.imshow(scaled, cmap="viridis", vmin=0.0, vmax=1.0, extent=extent, aspect="auto")
        fields = title.split("  ")
        lines = [fields[0], ", ".join(fields[1:])] if len(fields) > 1 else fields
        axis.set_title("\n".join(lines), fontsize="small")
        axis.set_xlabel("z1")
    axes[0].set_ylabel("z2")
    return figure
