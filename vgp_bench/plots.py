"""Line plots as PNG with Pillow (a dependency of torchvision): learning curves for reports.

Small on purpose: axes with round ticks, one polyline per series, a legend. No plotting
library is needed at run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

COLOURS = (
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


def round_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round tick values covering [low, high] (steps of 1, 2 or 5 x 10^n)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def line_plot(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: str | Path,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    size: tuple[int, int] = (960, 600),
) -> None:
    """Write a PNG with one line per `series` entry (label -> [(x, y), ...])."""
    width, height = size
    left, right, top, bottom = 80, 20, 40, 60 + 18 * len(series)
    points = [point for values in series.values() for point in values]
    if not points:
        raise ValueError("line_plot: no points to draw")
    x_low, x_high = min(p[0] for p in points), max(p[0] for p in points)
    y_low, y_high = y_range or (min(p[1] for p in points), max(p[1] for p in points))
    x_high = x_high if x_high > x_low else x_low + 1
    y_high = y_high if y_high > y_low else y_low + 1
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    plot_right, plot_bottom = width - right, height - bottom

    def to_pixel(x: float, y: float) -> tuple[float, float]:
        y = min(max(y, y_low), y_high)  # values off the range sit on its edge
        return (
            left + (x - x_low) / (x_high - x_low) * (plot_right - left),
            plot_bottom - (y - y_low) / (y_high - y_low) * (plot_bottom - top),
        )

    for tick in round_ticks(y_low, y_high):
        _, y = to_pixel(x_low, tick)
        draw.line([(left, y), (plot_right, y)], fill=(230, 230, 230))
        draw.text((left - 8, y), f"{tick:g}", fill="black", font=font, anchor="rm")
    for tick in round_ticks(x_low, x_high):
        x, _ = to_pixel(tick, y_low)
        draw.line([(x, plot_bottom), (x, plot_bottom + 4)], fill="black")
        draw.text((x, plot_bottom + 6), f"{tick:g}", fill="black", font=font, anchor="mt")
    draw.rectangle([left, top, plot_right, plot_bottom], outline="black")
    draw.text((width / 2, 12), title, fill="black", font=font, anchor="mt")
    draw.text((width / 2, plot_bottom + 22), x_label, fill="black", font=font, anchor="mt")
    draw.text((8, top - 20), y_label, fill="black", font=font)
    for index, (label, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        pixels = [to_pixel(x, y) for x, y in sorted(values)]
        if len(pixels) > 1:
            draw.line(pixels, fill=colour, width=2)
        else:
            x, y = pixels[0]
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=colour)
        legend_y = plot_bottom + 40 + 18 * index
        draw.line([(left, legend_y), (left + 30, legend_y)], fill=colour, width=3)
        draw.text((left + 38, legend_y), label, fill="black", font=font, anchor="lm")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
