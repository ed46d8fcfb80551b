"""Line plots as PNG with Pillow (a dependency of torchvision): learning curves for reports.

Small on purpose: panels stacked one above the other, each with axes with round ticks, one
polyline per series in its own colour and dash pattern, and a legend. No plotting library is
needed at run time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

Colour = tuple[int, int, int]
Points = Sequence[tuple[float, float]]

COLOURS: tuple[Colour, ...] = (
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (23, 190, 207),
    (127, 127, 127),
    (188, 189, 34),
    (0, 0, 0),
    (255, 187, 120),
)
# on/off lengths in pixels: solid, dashed, dotted, dash-dot
DASHES: tuple[tuple[int, ...], ...] = ((), (12, 5), (3, 4), (12, 4, 3, 4))
DASH_NAMES = ("solid", "dashed", "dotted", "dash-dot")


@dataclass(frozen=True)
class Style:
    """How one series is drawn: its colour and its dash pattern (empty: solid)."""

    colour: Colour
    dash: tuple[int, ...]


def distinct_styles(labels: Sequence[str]) -> dict[str, Style]:
    """A (colour, dash) pair per label, no two alike; neighbours differ in both for 12 labels."""
    styles = {}
    for index, label in enumerate(labels):
        colour = COLOURS[index % len(COLOURS)]
        dash = DASHES[(index + index // len(COLOURS)) % len(DASHES)]
        styles[label] = Style(colour, dash)
    return styles


def round_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round tick values covering [low, high] (steps of 1, 2 or 5 x 10^n)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def draw_polyline(
    draw: ImageDraw.ImageDraw,
    pixels: Sequence[tuple[float, float]],
    style: Style,
    width: int = 2,
) -> None:
    """A polyline in `style`: the dash pattern runs on across the vertices."""
    if not style.dash:
        draw.line(list(pixels), fill=style.colour, width=width)
        return
    piece, left, pen = 0, float(style.dash[0]), True
    for (x0, y0), (x1, y1) in itertools.pairwise(pixels):
        length, done = math.hypot(x1 - x0, y1 - y0), 0.0
        while done < length:
            step = min(left, length - done)
            if pen:
                start, end = done / length, (done + step) / length
                draw.line(
                    [
                        (x0 + (x1 - x0) * start, y0 + (y1 - y0) * start),
                        (x0 + (x1 - x0) * end, y0 + (y1 - y0) * end),
                    ],
                    fill=style.colour,
                    width=width,
                )
            done, left = done + step, left - step
            if left <= 0:
                piece = (piece + 1) % len(style.dash)
                left, pen = float(style.dash[piece]), not pen if len(style.dash) > 1 else pen


def panel_height(series_count: int, plot_height: int = 300) -> int:
    """Pixels a panel takes: title, plot area, x axis and one legend line per series."""
    return 30 + plot_height + 50 + 18 * series_count + 10


def draw_panel(
    draw: ImageDraw.ImageDraw,
    top: int,
    width: int,
    title: str,
    series: Mapping[str, Points],
    styles: Mapping[str, Style],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    x_label: str,
    y_label: str,
    plot_height: int = 300,
) -> None:
    """One panel whose top edge is at `top`: axes, a line per series, its legend below."""
    font = ImageFont.load_default()
    left, right = 80, width - 20
    plot_top, plot_bottom = top + 30, top + 30 + plot_height
    (x_low, x_high), (y_low, y_high) = x_range, y_range

    def to_pixel(x: float, y: float) -> tuple[float, float]:
        y = min(max(y, y_low), y_high)  # values off the range sit on its edge
        return (
            left + (x - x_low) / (x_high - x_low) * (right - left),
            plot_bottom - (y - y_low) / (y_high - y_low) * (plot_bottom - plot_top),
        )

    for tick in round_ticks(y_low, y_high):
        _, y = to_pixel(x_low, tick)
        draw.line([(left, y), (right, y)], fill=(230, 230, 230))
        draw.text((left - 8, y), f"{tick:g}", fill="black", font=font, anchor="rm")
    for tick in round_ticks(x_low, x_high):
        x, _ = to_pixel(tick, y_low)
        draw.line([(x, plot_bottom), (x, plot_bottom + 4)], fill="black")
        draw.text((x, plot_bottom + 6), f"{tick:g}", fill="black", font=font, anchor="mt")
    draw.rectangle([left, plot_top, right, plot_bottom], outline="black")
    draw.text((left, top + 8), title, fill="black", font=font)
    draw.text((right, top + 8), y_label, fill="black", font=font, anchor="ra")
    draw.text(((left + right) / 2, plot_bottom + 22), x_label, fill="black", font=font, anchor="mt")
    for index, (label, values) in enumerate(series.items()):
        style = styles[label]
        pixels = [to_pixel(x, y) for x, y in sorted(values)]
        if len(pixels) > 1:
            draw_polyline(draw, pixels, style)
        else:
            x, y = pixels[0]
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=style.colour)
        legend_y = plot_bottom + 44 + 18 * index
        draw_polyline(draw, [(left, legend_y), (left + 44, legend_y)], style, width=3)
        draw.text((left + 52, legend_y), label, fill="black", font=font, anchor="lm")


def panel_plot(
    panels: Mapping[str, Mapping[str, Points]],
    path: str | Path,
    title: str,
    x_label: str,
    y_label: str,
    styles: Mapping[str, Style] | None = None,
    y_ranges: Mapping[str, tuple[float, float]] | None = None,
    width: int = 960,
) -> None:
    """Write a PNG with one panel per `panels` entry (title -> {label -> [(x, y), ...]}).

    Panels share the x range; each fits its own y range unless `y_ranges` gives it. Series are
    drawn in `styles` (label -> Style; by default a distinct style per label over all panels).
    """
    points = [p for series in panels.values() for values in series.values() for p in values]
    if not points:
        raise ValueError("panel_plot: no points to draw")
    labels = list(dict.fromkeys(label for series in panels.values() for label in series))
    styles = styles or distinct_styles(labels)
    x_low, x_high = min(p[0] for p in points), max(p[0] for p in points)
    x_high = x_high if x_high > x_low else x_low + 1
    heights = [panel_height(len(series)) for series in panels.values()]
    image = Image.new("RGB", (width, 30 + sum(heights)), "white")
    draw = ImageDraw.Draw(image)
    draw.text((width / 2, 10), title, fill="black", font=ImageFont.load_default(), anchor="mt")
    top = 30
    for (name, series), height in zip(panels.items(), heights):
        values = [y for points in series.values() for _, y in points]
        y_low, y_high = (y_ranges or {}).get(name, (min(values), max(values)))
        y_high = y_high if y_high > y_low else y_low + 1
        draw_panel(
            draw,
            top,
            width,
            name,
            series,
            styles,
            (x_low, x_high),
            (y_low, y_high),
            x_label,
            y_label,
        )
        top += height
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def line_plot(
    series: Mapping[str, Points],
    path: str | Path,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
) -> None:
    """Write a PNG with one line per `series` entry (label -> [(x, y), ...]) in one panel."""
    panel_plot(
        {"": series}, path, title, x_label, y_label, y_ranges={"": y_range} if y_range else None
    )
