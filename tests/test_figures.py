"""The figures (vgp_bench/figures/drawing.py, images.py) by what they show: the lines, the
labels, the data plotted and the image arrays drawn, never their pixels; each written as PNG
and PDF."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.test_draw import X_SHAPE, small_draw
from vgp_bench.figures.drawing import curves_figure, image_grid_figure, save_figure
from vgp_bench.figures.images import (
    FIGURE_TITLES,
    grid_pixels,
    image_grid,
    model_figures,
    reconstruction_pairs,
    save_grid,
    save_model_figures,
)


def drawn_image(figure) -> np.ndarray:
    (axis,) = figure.axes
    (image,) = axis.get_images()
    return np.asarray(image.get_array())


def test_a_curves_figure_draws_each_series_in_its_panel_with_labels() -> None:
    panels = {
        "first": {"a": [(2, 3.0), (1, 1.0)], "b": [(1, 2.0)]},
        "second": {"a": [(1, -1.0), (2, 50.0)]},
    }
    figure = curves_figure(panels, "Title", "epoch", "bound", y_ranges={"second": (-2.0, 2.0)})
    first, second = figure.axes
    assert figure.get_suptitle() == "Title"
    assert (first.get_title(loc="left"), second.get_title(loc="left")) == ("first", "second")
    lines = {line.get_label(): line for line in first.get_lines()}
    assert list(lines["a"].get_xdata()) == [1, 2]  # sorted by x
    assert list(lines["a"].get_ydata()) == [1.0, 3.0]
    assert lines["b"].get_marker() == "o"  # a single point is still seen
    (clamped,) = second.get_lines()
    assert list(clamped.get_ydata()) == [-1.0, 2.0]  # off the range: on its edge
    assert second.get_ylim() == (-2.0, 2.0)
    assert clamped.get_color() == lines["a"].get_color()  # one label, one style
    assert second.get_xlabel() == "epoch" and first.get_ylabel() == "bound"
    assert [t.get_text() for t in first.get_legend().get_texts()] == ["a", "b"]
    with pytest.raises(ValueError, match="no points"):
        curves_figure({"empty": {}}, "Title", "x", "y")


def test_save_figure_writes_png_and_pdf_beside_each_other(tmp_path: Path) -> None:
    figure = curves_figure({"p": {"a": [(0, 0.0), (1, 1.0)]}}, "T", "x", "y")
    written = save_figure(figure, tmp_path / "sub" / "curves.png")
    assert written == [tmp_path / "sub" / "curves.png", tmp_path / "sub" / "curves.pdf"]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert written[1].read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["curves.pdf", "curves.png"]


def test_a_grey_grid_is_drawn_as_the_grid_itself(tmp_path: Path) -> None:
    images = torch.rand(6, 1, 5, 4, generator=torch.Generator().manual_seed(0))
    grid = image_grid(images, columns=3)
    pixels = grid_pixels(grid)
    assert pixels.shape == (2 * 7 + 2, 3 * 6 + 2)  # 2-pixel padding around each image
    np.testing.assert_array_equal(pixels[2:7, 2:6], images[0, 0].numpy())
    figure = image_grid_figure(pixels, "a title")
    np.testing.assert_array_equal(drawn_image(figure), pixels)
    assert figure.axes[0].get_title() == "a title" and not figure.axes[0].axison
    returned, written = save_grid(images, tmp_path / "grid.png", "a title", columns=3)
    torch.testing.assert_close(returned, grid)
    assert [path.name for path in written] == ["grid.png", "grid.pdf"]


def test_a_colour_grid_keeps_its_channels() -> None:
    images = torch.rand(4, 3, 5, 5, generator=torch.Generator().manual_seed(1))
    pixels = grid_pixels(image_grid(images, columns=2))
    assert pixels.shape == (16, 16, 3)  # 2-pixel padding
    np.testing.assert_array_equal(pixels[2:7, 2:7], images[0].permute(1, 2, 0).numpy())


def test_reconstructions_sit_beside_their_originals() -> None:
    originals, reconstructions = torch.zeros(3, 1, 2, 2), torch.ones(3, 1, 2, 2)
    pairs = reconstruction_pairs(originals, reconstructions)
    assert [float(image.mean()) for image in pairs] == [0.0, 1.0] * 3


def test_drawn_canvas_steps_are_the_models_canvases_row_by_row(tmp_path: Path) -> None:
    model = small_draw()
    figures = model_figures(model, torch.Generator().manual_seed(3))
    canvases = model.extra_figures(8, torch.Generator().manual_seed(3))["canvas_steps"]
    steps = canvases.shape[0] // 8
    expected = grid_pixels(image_grid(canvases, columns=steps))
    height, width = X_SHAPE[1:]
    assert expected.shape == (8 * (height + 2) + 2, steps * (width + 2) + 2)
    np.testing.assert_array_equal(drawn_image(figures["canvas_steps"]), expected)
    title = figures["canvas_steps"].axes[0].get_title()
    assert title.split() == FIGURE_TITLES["canvas_steps"].split()  # all of it, wrapped
    assert len(title.splitlines()) > 1  # a narrow grid: the title is wrapped to its width
    paths = save_model_figures(model, tmp_path, torch.Generator().manual_seed(3))
    assert [path.name for path in paths] == ["canvas_steps.png", "canvas_steps.pdf"]
