"""Image grids of samples and reconstructions."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor
from torchvision.utils import make_grid, save_image


def image_grid(images: Tensor, columns: int | None = None) -> Tensor:
    """A `[C, H, W]` grid of `[N, C, H, W]` images in [0, 1], square unless `columns` is given."""
    columns = columns or max(1, math.ceil(math.sqrt(images.shape[0])))
    return make_grid(
        images.detach().float().clamp(0, 1).cpu(), nrow=columns, padding=2, pad_value=0.5
    )


def save_grid(images: Tensor, path: str | Path, columns: int | None = None) -> Tensor:
    """Save a grid PNG and return the grid (for TensorBoard)."""
    grid = image_grid(images, columns)
    save_image(grid, str(path))
    return grid


def reconstruction_pairs(originals: Tensor, reconstructions: Tensor) -> Tensor:
    """Interleave originals and reconstructions row by row: `[2N, C, H, W]`."""
    return torch.stack([originals, reconstructions], dim=1).flatten(0, 1)
