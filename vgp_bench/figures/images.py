"""Image grids of samples and reconstructions, and the figures a run folder holds (PNG and PDF
by matplotlib, `figures.drawing`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor, nn
from torchvision.utils import make_grid

from vgp_bench.data.base import ImageSplit
from vgp_bench.diagnostics import evaluation_mode
from vgp_bench.figures.drawing import image_grid_figure, save_figure
from vgp_bench.models.base import LatentVariableModel

SAMPLES_TITLE = "Samples from the model, x ~ p(x | z), z ~ p(z)"
RECONSTRUCTIONS_TITLE = "Test images and their reconstructions, side by side"
# the models' own figures (LatentVariableModel.extra_figures), by name
FIGURE_TITLES = {
    "canvas_steps": "DRAW's canvas sigmoid(c_t) at evenly spaced steps t (columns, the last "
    "is the final canvas); a draw from the prior per row",
}


def image_grid(images: Tensor, columns: int | None = None) -> Tensor:
    """A `[C, H, W]` grid of `[N, C, H, W]` images in [0, 1], square unless `columns` is given."""
    columns = columns or max(1, math.ceil(math.sqrt(images.shape[0])))
    return make_grid(
        images.detach().float().clamp(0, 1).cpu(), nrow=columns, padding=2, pad_value=0.5
    )


def grid_pixels(grid: Tensor) -> np.ndarray:
    """A `[C, H, W]` grid as matplotlib's image array: `[H, W]` when grey (make_grid repeats
    one channel three times), else `[H, W, 3]`."""
    pixels = grid.detach().float().cpu().numpy()
    if pixels.shape[0] == 1 or (pixels.shape[0] == 3 and np.array_equal(pixels[0], pixels[1])
                                and np.array_equal(pixels[0], pixels[2])):  # fmt: skip
        return pixels[0]
    return pixels.transpose(1, 2, 0)


def grid_figure(images: Tensor, title: str, columns: int | None = None) -> tuple[Tensor, Figure]:
    """The grid of `images` (`image_grid`) and the figure that draws it."""
    grid = image_grid(images, columns)
    return grid, image_grid_figure(grid_pixels(grid), title)


def save_grid(
    images: Tensor, path: str | Path, title: str, columns: int | None = None
) -> tuple[Tensor, list[Path]]:
    """The grid of `images` as a figure, `<path stem>.png` and `.pdf` (atomically: a link there
    is replaced, never written through); the grid (for TensorBoard) and the files written."""
    grid, figure = grid_figure(images, title, columns)
    return grid, save_figure(figure, path)


def reconstruction_pairs(originals: Tensor, reconstructions: Tensor) -> Tensor:
    """Interleave originals and reconstructions row by row: `[2N, C, H, W]`."""
    return torch.stack([originals, reconstructions], dim=1).flatten(0, 1)


def save_samples(
    model: LatentVariableModel, run_dir: Path, generator: torch.Generator, count: int = 64
) -> tuple[Tensor, list[Path]]:
    """samples.png / .pdf: `count` draws from the model."""
    return save_grid(model.sample(count, generator), run_dir / "samples.png", SAMPLES_TITLE)


def save_reconstructions(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    test: ImageSplit,
    run_dir: Path,
    generator: torch.Generator,
) -> tuple[Tensor, list[Path]]:
    """reconstructions.png / .pdf: the first 32 test images, each beside its reconstruction."""
    originals = test.gather(torch.arange(min(32, len(test))), generator)
    reconstructions = model.reconstruct(originals, heads, generator)
    pairs = reconstruction_pairs(originals, reconstructions)
    return save_grid(pairs, run_dir / "reconstructions.png", RECONSTRUCTIONS_TITLE, columns=16)


def model_figures(model: LatentVariableModel, generator: torch.Generator) -> dict[str, Figure]:
    """The model's own figures (DRAW's canvas_steps), eight rows each, by name."""
    figures = {}
    for name, images in model.extra_figures(8, generator).items():
        columns = max(1, images.shape[0] // 8)
        figures[name] = grid_figure(images, FIGURE_TITLES.get(name, name), columns)[1]
    return figures


def save_model_figures(
    model: LatentVariableModel, run_dir: Path, generator: torch.Generator
) -> list[Path]:
    """`model_figures` as `<name>.png` and `.pdf` in `run_dir`; the files written."""
    figures = model_figures(model, generator)
    return [path for name, fig in figures.items() for path in save_figure(fig, run_dir / name)]


@torch.no_grad()
def save_run_figures(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    test: ImageSplit,
    run_dir: Path,
    generator: torch.Generator,
) -> tuple[dict[str, Tensor], list[Path]]:
    """samples, reconstructions and the model's own figures in `run_dir` (PNG and PDF); the
    first two grids (for TensorBoard) and the files written. Leaves model and heads in the
    modes they were in."""
    with evaluation_mode(model, heads):
        samples, sample_files = save_samples(model, run_dir, generator)
        pairs, pair_files = save_reconstructions(model, heads, test, run_dir, generator)
        model_files = save_model_figures(model, run_dir, generator)
    grids = {"samples": samples, "reconstructions": pairs}
    return grids, [*sample_files, *pair_files, *model_files]
