"""Image grids of samples and reconstructions, and the figures a run folder holds."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn
from torchvision.utils import make_grid, save_image

from vgp_bench.analysis.diagnostics import evaluation_mode
from vgp_bench.data.base import ImageSplit
from vgp_bench.files import atomic_file
from vgp_bench.models.base import LatentVariableModel


def image_grid(images: Tensor, columns: int | None = None) -> Tensor:
    """A `[C, H, W]` grid of `[N, C, H, W]` images in [0, 1], square unless `columns` is given."""
    columns = columns or max(1, math.ceil(math.sqrt(images.shape[0])))
    return make_grid(
        images.detach().float().clamp(0, 1).cpu(), nrow=columns, padding=2, pad_value=0.5
    )


def save_grid(images: Tensor, path: str | Path, columns: int | None = None) -> Tensor:
    """Save a grid PNG atomically (a link at `path` is replaced, never written through) and
    return the grid (for TensorBoard)."""
    grid = image_grid(images, columns)
    with atomic_file(path) as temporary:
        save_image(grid, str(temporary), format="png")
    return grid


def reconstruction_pairs(originals: Tensor, reconstructions: Tensor) -> Tensor:
    """Interleave originals and reconstructions row by row: `[2N, C, H, W]`."""
    return torch.stack([originals, reconstructions], dim=1).flatten(0, 1)


@torch.no_grad()
def save_run_figures(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    test: ImageSplit,
    run_dir: Path,
    generator: torch.Generator,
    count: int = 64,
) -> dict[str, Tensor]:
    """samples.png, reconstructions.png and the model's own figures in `run_dir`; returns the
    first two grids (for TensorBoard). Leaves model and heads in the modes they were in."""
    with evaluation_mode(model, heads):
        grids = {"samples": save_grid(model.sample(count, generator), run_dir / "samples.png")}
        originals = test.gather(torch.arange(min(32, len(test))), generator)
        reconstructions = model.reconstruct(originals, heads, generator)
        grids["reconstructions"] = save_grid(
            reconstruction_pairs(originals, reconstructions),
            run_dir / "reconstructions.png",
            columns=16,
        )
        for name, images in model.extra_figures(8, generator).items():
            save_grid(images, run_dir / f"{name}.png", columns=max(1, images.shape[0] // 8))
        return grids
