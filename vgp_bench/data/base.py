"""In-memory binary image splits: the only thing the trainer sees of a dataset."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from vgp_bench.errors import ConfigError

Binarization = Literal["fixed", "dynamic"]


class ImageSplit:
    """One split held as a uint8 tensor; batches come out as float {0, 1} `[B, C, H, W]`.

    With `dynamic=False` the stored images are already binary and are returned as they are.
    With `dynamic=True` they are grey levels 0..255, binarized afresh at every draw by a
    Bernoulli with the grey level / 255 as probability, through the caller's generator.
    """

    def __init__(self, images: Tensor, dynamic: bool = False, labels: Tensor | None = None):
        if images.dtype != torch.uint8 or images.dim() != 4:
            raise ValueError(
                f"images must be uint8 [N, C, H, W], got {images.dtype} {tuple(images.shape)}"
            )
        if not dynamic and images.numel() and int(images.max()) > 1:
            raise ValueError(
                "a fixed split must hold binary images (0/1); pass dynamic=True for grey levels"
            )
        self.images = images
        self.dynamic = dynamic
        self.labels = labels

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def x_shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def to(self, device: torch.device | str) -> ImageSplit:
        labels = None if self.labels is None else self.labels.to(device)
        return ImageSplit(self.images.to(device), self.dynamic, labels)

    def select(self, indices: Tensor) -> ImageSplit:
        """The images at `indices` (for sharding a split across ranks)."""
        indices = indices.to(self.images.device)
        labels = None if self.labels is None else self.labels.index_select(0, indices)
        return ImageSplit(self.images.index_select(0, indices), self.dynamic, labels)

    def subset(self, count: int) -> ImageSplit:
        """The first `count` images (for smoke runs and tests)."""
        labels = None if self.labels is None else self.labels[:count]
        return ImageSplit(self.images[:count], self.dynamic, labels)

    def gather(self, indices: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Float {0, 1} images at `indices`, `[B, C, H, W]`."""
        selected = self.images.index_select(0, indices.to(self.images.device))
        if not self.dynamic:
            return selected.float()
        probabilities = selected.float().div_(255.0)
        return torch.bernoulli(probabilities, generator=generator)

    def pixel_means(self) -> Tensor:
        """The mean image in [0, 1], `[C, H, W]` float32: of the grey levels / 255 for a dynamic
        split (each pixel's Bernoulli probability), of the binary images for a fixed one."""
        total = self.images.sum(0, dtype=torch.float64)  # [C, H, W]
        scale = 255.0 if self.dynamic else 1.0
        return (total / (scale * max(len(self), 1))).float()

    def epoch_order(self, epoch: int, seed: int, shuffle: bool = True) -> Tensor:
        """The order of one epoch: shuffled as a function of (seed, epoch) only, so resume is
        exact; or, with `shuffle=False`, the stored order every epoch."""
        if not shuffle:
            return torch.arange(len(self))
        order_generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        return torch.randperm(len(self), generator=order_generator)

    def batch_count(self, batch_size: int, drop_last: bool = False) -> int:
        """Number of batches of `batch_size` in one pass (the last one partial unless dropped)."""
        return len(self) // batch_size if drop_last else -(-len(self) // batch_size)

    def batch_indices(
        self, batch_size: int, order: Tensor | None = None, start: int = 0, drop_last: bool = False
    ) -> Iterator[Tensor]:
        """Index tensors of the batches in `order` (default: stored order) from batch `start`."""
        order = torch.arange(len(self)) if order is None else order
        for batch_number in range(start, self.batch_count(batch_size, drop_last)):
            yield order[batch_number * batch_size : (batch_number + 1) * batch_size]

    def batches(
        self,
        batch_size: int,
        order: Tensor | None = None,
        start: int = 0,
        generator: torch.Generator | None = None,
        drop_last: bool = False,
    ) -> Iterator[Tensor]:
        """Batches of images in `order` (default: stored order) starting at batch `start`."""
        for indices in self.batch_indices(batch_size, order, start, drop_last):
            yield self.gather(indices, generator)


@dataclass
class DatasetBundle:
    """The splits of one dataset plus the provenance every metrics.json records."""

    train: ImageSplit
    test: ImageSplit
    valid: ImageSplit | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def x_shape(self) -> tuple[int, int, int]:
        return self.train.x_shape

    def split_sizes(self) -> dict[str, int]:
        sizes = {"train": len(self.train), "test": len(self.test)}
        if self.valid is not None:
            sizes["valid"] = len(self.valid)
        return sizes

    def to(self, device: torch.device | str) -> DatasetBundle:
        valid = None if self.valid is None else self.valid.to(device)
        return DatasetBundle(self.train.to(device), self.test.to(device), valid, dict(self.info))


def check_binarization(binarization: str) -> None:
    """Refuse a `dataset.binarization` other than fixed or dynamic."""
    if binarization not in ("fixed", "dynamic"):
        raise ConfigError(
            f"dataset.binarization must be 'fixed' or 'dynamic', got {binarization!r}"
        )


def check_subset(subset: int | None) -> None:
    """Refuse a `dataset.subset` that is not a positive number of images or null."""
    if subset is not None and subset < 1:
        raise ConfigError(
            f"dataset.subset must be a positive number of images or null, got {subset}"
        )


def first_images(splits: dict[str, ImageSplit], subset: int | None) -> dict[str, ImageSplit]:
    """The first `subset` images of each split (all of them when `subset` is None)."""
    check_subset(subset)
    if subset is None:
        return splits
    return {name: split.subset(subset) for name, split in splits.items()}


def bernoulli_binarize(grey: Tensor, seed: int) -> Tensor:
    """One fixed Bernoulli draw of uint8 grey levels (probability = grey / 255), as uint8 0/1."""
    generator = torch.Generator().manual_seed(seed)
    probabilities = grey.float().div_(255.0)
    return torch.bernoulli(probabilities, generator=generator).to(torch.uint8)
