"""Synthetic binary images drawn from a few smooth prototypes: a dataset needing no files."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from vgp_bench.data.base import DatasetBundle, ImageSplit, check_binarization, check_subset


def prototype_images(shape: Sequence[int], n_prototypes: int, seed: int) -> torch.Tensor:
    """Smooth grey-level prototypes in [0, 1], `[K, C, H, W]` (blurred random blobs)."""
    generator = torch.Generator().manual_seed(seed)
    channels, height, width = (int(v) for v in shape)
    coarse = torch.rand(
        n_prototypes, channels, max(2, height // 4), max(2, width // 4), generator=generator
    )
    smooth = F.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    return (smooth - 0.5).mul(6.0).sigmoid()


def load_synthetic(
    data_dir: str | None = None,
    shape: Sequence[int] = (1, 28, 28),
    n_train: int = 500,
    n_valid: int = 100,
    n_test: int = 100,
    n_prototypes: int = 5,
    seed: int = 0,
    binarization: str = "fixed",
    subset: int | None = None,
) -> DatasetBundle:
    """Images binarized from noisy prototypes; `dynamic` keeps grey levels for train."""
    check_binarization(binarization)
    check_subset(subset)
    prototypes = prototype_images(shape, n_prototypes, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    splits: dict[str, ImageSplit] = {}
    for name, count in sizes.items():
        count = count if subset is None else min(count, subset)
        labels = torch.randint(n_prototypes, (count,), generator=generator)
        grey = prototypes[labels].mul(255.0).round().to(torch.uint8)
        if name == "train" and binarization == "dynamic":
            splits[name] = ImageSplit(grey, dynamic=True, labels=labels)
        else:
            binary = torch.bernoulli(grey.float() / 255.0, generator=generator).to(torch.uint8)
            splits[name] = ImageSplit(binary, dynamic=False, labels=labels)
    info = {
        "name": "synthetic",
        "binarization": binarization,
        "seed": seed,
        "split_sizes": {name: len(split) for name, split in splits.items()},
    }
    return DatasetBundle(
        train=splits["train"], valid=splits["valid"], test=splits["test"], info=info
    )
