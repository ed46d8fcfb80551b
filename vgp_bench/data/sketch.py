"""TU-Berlin Sketch (Eitz, Hays & Alexa 2012): load the binary HDF5 that `vgp-data sketch` writes.

One file per (resolution, dilation, seed), named by them: `train` and `test` groups of fixed
`binary` uint8 `[N, R, R]` and `labels` int64 `[N]`, plus the `categories` names. The
conversion (stroke rule, split, decoding) lives in `sketch_convert`; training imports only
this module.
"""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import torch

from vgp_bench.data.base import DatasetBundle, ImageSplit, first_images
from vgp_bench.data.store import plain_attrs
from vgp_bench.errors import CorruptDataError, MissingDataError

FORMAT_VERSION = 1
SOURCE_SIZE = 1111  # side of every TU-Berlin PNG
PUBLISHED = (
    'Eitz, Hays & Alexa 2012, "How do humans sketch objects?", '
    "https://cybertron.cg.tu-berlin.de/eitz/projects/classifysketch/ (file sketches_png.zip)"
)


def default_dilation(resolution: int) -> int:
    """Side of the max filter that keeps 1111-pixel strokes through the resize to `resolution`."""
    return math.ceil(SOURCE_SIZE / resolution)


def output_path(data_dir: Path | str, resolution: int, dilation: int, seed: int) -> Path:
    """`<data_dir>/sketch-r<resolution>-d<dilation>-s<seed>.h5`."""
    return Path(data_dir) / f"sketch-r{resolution}-d{dilation}-s{seed}.h5"


def conversion_command(resolution: int, dilation: int, seed: int, data_dir: Path | str) -> str:
    """The `vgp-data sketch` command that writes the file these options name."""
    command = "vgp-data sketch --source /path/to/sketches_png.zip"
    if resolution != 56:
        command += f" --resolution {resolution}"
    if dilation != default_dilation(resolution):
        command += f" --dilation {dilation}"
    if seed != 0:
        command += f" --seed {seed}"
    if Path(data_dir) != Path("data"):
        command += f" --data-dir {data_dir}"
    return command


def load_sketch(
    data_dir: str,
    resolution: int = 56,
    seed: int = 0,
    dilation: int | None = None,
    path: str | None = None,
    subset: int | None = None,
) -> DatasetBundle:
    """The converted Sketch data: fixed binary `[N, 1, R, R]` train and test splits, no valid."""
    dilation = default_dilation(resolution) if dilation is None else dilation
    if path is None:
        file_path = output_path(data_dir, resolution, dilation, seed)
    else:
        file_path = Path(path) if Path(path).is_absolute() else Path(data_dir) / path
    command = conversion_command(resolution, dilation, seed, data_dir)
    if not file_path.exists():
        raise MissingDataError(
            f"Sketch data not found at {file_path}: download sketches_png.zip ({PUBLISHED}) "
            f"and convert it with `{command}`"
        )
    try:
        with h5py.File(file_path, "r") as file:
            attrs = plain_attrs(file.attrs)
            arrays = {
                split: (np.asarray(file[f"{split}/binary"]), np.asarray(file[f"{split}/labels"]))
                for split in ("train", "test")
            }
            categories = [name.decode() for name in file["categories"][()]]
        splits = {split: _checked_split(*arrays[split], len(categories)) for split in arrays}
        if attrs.get("format_version") != FORMAT_VERSION:
            raise CorruptDataError(
                f"format_version {attrs.get('format_version')} != {FORMAT_VERSION}"
            )
        if path is None and (attrs["resolution"], attrs["dilation"], attrs["seed"]) != (
            resolution,
            dilation,
            seed,
        ):
            raise CorruptDataError("its attrs do not match the options in its name")
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise CorruptDataError(
            f"{file_path} cannot be used ({error}); rebuild it with `{command} --force`"
        ) from error
    splits = first_images(splits, subset)
    info = {
        "name": "sketch",
        "binarization": "fixed (stroke rule)",
        "split_sizes": {split: len(images) for split, images in splits.items()},
        "path": str(file_path.resolve()),
        "subset": subset,
        "n_categories": len(categories),
        "preprocessing": attrs,
    }
    return DatasetBundle(train=splits["train"], test=splits["test"], valid=None, info=info)


def _checked_split(binary: np.ndarray, labels: np.ndarray, n_categories: int) -> ImageSplit:
    """An ImageSplit `[N, 1, R, R]` from stored arrays, after checking what a file must hold."""
    if binary.dtype != np.uint8 or binary.ndim != 3 or binary.shape[1] != binary.shape[2]:
        raise CorruptDataError(
            f"binary images must be uint8 [N, R, R], got {binary.dtype} {binary.shape}"
        )
    if binary.size and binary.max() > 1:
        raise CorruptDataError("binary images hold values other than 0 and 1")
    if labels.shape != (len(binary),) or (
        labels.size and not 0 <= labels.min() <= labels.max() < n_categories
    ):
        raise CorruptDataError("labels do not match the images or the categories")
    images = torch.from_numpy(binary).unsqueeze(1)  # [N, 1, R, R]
    return ImageSplit(images, dynamic=False, labels=torch.from_numpy(labels.astype(np.int64)))
