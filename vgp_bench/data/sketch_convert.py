"""`vgp-data sketch`: convert the TU-Berlin PNGs to binary HDF5.

Protocol of the public DRAW re-implementations (docs/design.md, section 6.2), per image:
1. strokes: a pixel darker than the mean grey level of its image -> 1, else 0;
2. dilation: a square max filter of side `dilation` at full size, by default
   ceil(1111 / resolution) (20 at 56x56), so that a dilated stroke is at least one output
   pixel wide and cannot fall between the samples of the resize;
3. resize: torchvision bilinear with antialias to `resolution` x `resolution`;
4. binarization: resized value >= 0.5 -> 1. A stroke dilated to at least one output pixel's
   width covers at least half of the filter mass of the output pixel nearest its centre line,
   so strokes survive without gaps (tested on 1-pixel lines: horizontal, vertical, diagonal).
Split per category: the file names sorted as strings, permuted by a generator seeded from
(seed, category name); the last round(n / 10) go to test (8 of 80: 18,000 / 2,000 in all).
Each split is stored round-robin over categories, so any prefix covers the categories evenly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import Tensor
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.v2 import functional as TF
from tqdm import tqdm

from vgp_bench.data.sketch import FORMAT_VERSION, PUBLISHED, default_dilation, output_path
from vgp_bench.data.sketch_sources import (
    FolderSource,
    SketchFile,
    ZipSource,
    open_source,
    sorted_categories,
)
from vgp_bench.data.store import existing_file_state, plain_attrs
from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError
from vgp_bench.files import atomic_file

TEST_SHARE = 10  # one image in ten goes to test (8 of 80)
CHUNK_SIZE = 32  # images per task of the process pool
RULES = {
    "stroke_rule": "pixel < mean grey level of its image -> 1",
    "dilation_rule": "square max filter of side `dilation` at full size "
    "(default ceil(1111 / resolution))",
    "resize_rule": "torchvision bilinear resize with antialias to resolution x resolution",
    "threshold_rule": "resized value >= 0.5 -> 1",
    "split_rule": "per category: sorted file names, permuted by a generator seeded from "
    "(seed, category); the last round(n / 10) -> test; stored round-robin over categories",
}


# --- the stroke rule: pure functions of one image -------------------------------------------------


def decode_grey(data: bytes) -> Tensor:
    """PNG bytes -> grey levels, uint8 `[1, H, W]`."""
    encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    with warnings.catch_warnings():  # torchvision 0.29 announces its decoders' move to TorchCodec
        warnings.filterwarnings("ignore", "The image decoding", DeprecationWarning)
        return decode_image(encoded, ImageReadMode.GRAY)


def stroke_mask(grey: Tensor) -> Tensor:
    """Pixels darker than the image's mean grey level, bool `[H, W]` from uint8 `[1, H, W]`."""
    total, count = int(grey.sum()), grey.numel()
    return grey[0] < -(-total // count)  # level < total / count  <=>  level < ceil(total / count)


def dilate(mask: Tensor, kernel: int) -> Tensor:
    """Square max filter of side `kernel` (same size out), bool `[H, W]`; separable, O(log k)."""
    before, after = (kernel - 1) // 2, kernel // 2
    for dim in (0, 1):
        padding = (before, after, 0, 0) if dim == 1 else (0, 0, before, after)
        window_max = F.pad(mask[None], padding)[0]  # length + kernel - 1 along dim
        width = 1  # window_max[i] = max of `width` inputs from i on; double it, then top up
        while 2 * width <= kernel:
            kept = window_max.shape[dim] - width
            window_max = window_max.narrow(dim, 0, kept) | window_max.narrow(dim, width, kept)
            width *= 2
        if width < kernel:
            shift = kernel - width
            kept = window_max.shape[dim] - shift
            window_max = window_max.narrow(dim, 0, kept) | window_max.narrow(dim, shift, kept)
        mask = window_max
    return mask


def downsample_binary(mask: Tensor, resolution: int) -> Tensor:
    """Antialiased bilinear resize of a bool `[H, W]` mask, then >= 0.5: uint8 `[R, R]`."""
    resized = TF.resize(mask[None].float(), [resolution, resolution], antialias=True)  # [1, R, R]
    return (resized[0] >= 0.5).to(torch.uint8)


def sketch_to_binary(grey: Tensor, resolution: int, dilation: int) -> Tensor:
    """One sketch's grey levels uint8 `[1, H, W]` -> its binary image uint8 `[R, R]`."""
    return downsample_binary(dilate(stroke_mask(grey), dilation), resolution)


# --- the split ------------------------------------------------------------------------------------


def held_out_count(n_files: int) -> int:
    """Images of a category that go to test: round(n / 10), halves up (8 of 80)."""
    return (n_files + TEST_SHARE // 2) // TEST_SHARE


def category_generator(seed: int, category: str) -> torch.Generator:
    """A generator seeded from (seed, category name), independent of the other categories."""
    digest = hashlib.sha256(f"{seed}\0{category}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def split_category(names: Sequence[str], seed: int, category: str) -> tuple[list[int], list[int]]:
    """Indices into sorted `names` of the (train, test) images of one category, each sorted."""
    if held_out_count(len(names)) == 0:
        raise CorruptDataError(
            f"category {category!r} has {len(names)} image(s); a test image needs at least 5"
        )
    order = torch.randperm(len(names), generator=category_generator(seed, category)).tolist()
    cut = len(names) - held_out_count(len(names))
    return sorted(order[:cut]), sorted(order[cut:])


def round_robin(members: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(category, member) pairs ordered by rank within category, then category."""
    pairs = [
        (rank, category) for category, items in enumerate(members) for rank in range(len(items))
    ]
    return [(category, members[category][rank]) for rank, category in sorted(pairs)]


# --- decoding, in this process or in a pool -------------------------------------------------------


@dataclass
class Decoded:
    """The outcome for one image: its binary image or the reason it could not be read."""

    index: int
    binary: np.ndarray | None  # uint8 [R, R]
    size: tuple[int, int] | None
    error: str | None


def short_error(error: Exception) -> str:
    """The reason of a decoding error without the C++ file and line prefix."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^[\w()]+, \S+:\d+, ", "", message)


def decode_one(
    source: FolderSource | ZipSource, index: int, key: str, resolution: int, dilation: int
) -> Decoded:
    """Read, decode and convert one image; any failure is recorded, not raised."""
    try:
        grey = decode_grey(source.read(key))  # [1, H, W]
        binary = sketch_to_binary(grey, resolution, dilation)  # [R, R]
    except Exception as error:  # a broken file of any kind is reported by path
        return Decoded(index, None, None, short_error(error))
    return Decoded(index, binary.numpy(), (grey.shape[1], grey.shape[2]), None)


_worker: dict[str, Any] = {}  # per pool process: its open source and the options


def _start_worker(source_path: str, resolution: int, dilation: int) -> None:
    torch.set_num_threads(1)
    _worker.update(source=open_source(Path(source_path)), resolution=resolution, dilation=dilation)


def _decode_chunk(chunk: list[tuple[int, str]]) -> list[Decoded]:
    return [
        decode_one(_worker["source"], index, key, _worker["resolution"], _worker["dilation"])
        for index, key in chunk
    ]


def decode_all(
    source: FolderSource | ZipSource,
    keys: Sequence[str],
    resolution: int,
    dilation: int,
    workers: int,
) -> Iterator[Decoded]:
    """Convert every image, in `workers` processes when more than one."""
    if workers <= 1:  # one thread: intra-op threads only contend on images this small
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for index, key in enumerate(keys):
                yield decode_one(source, index, key, resolution, dilation)
        finally:
            torch.set_num_threads(threads)
        return
    numbered = list(enumerate(keys))
    chunks = [numbered[start : start + CHUNK_SIZE] for start in range(0, len(keys), CHUNK_SIZE)]
    with ProcessPoolExecutor(
        workers,
        mp_context=get_context("spawn"),
        initializer=_start_worker,
        initargs=(str(source.path), resolution, dilation),
    ) as pool:
        for results in pool.map(_decode_chunk, chunks):
            yield from results


# --- conversion -----------------------------------------------------------------------------------


class CorruptImagesError(ValueError):
    """Some source images cannot be decoded; the message lists each by path."""


def converted_attrs(path: Path) -> dict[str, Any]:
    """The attrs of a file at `path` that holds the binary images and labels of both splits."""
    try:
        with h5py.File(path, "r") as file:
            attrs = plain_attrs(file.attrs)
            missing = [
                f"{split}/{name}"
                for split in ("train", "test")
                for name in ("binary", "labels")
                if f"{split}/{name}" not in file
            ]
    except (OSError, KeyError, ValueError) as error:
        raise CorruptDataError(f"{path} cannot be read ({error})") from None
    if missing:
        raise CorruptDataError(f"{path} has no {', '.join(missing)}")
    return attrs


def is_converted(path: Path, resolution: int, dilation: int, seed: int) -> bool:
    """Whether `path` is a complete file of this format made with these options."""
    wanted = {
        "format_version": FORMAT_VERSION,
        "resolution": resolution,
        "dilation": dilation,
        "seed": seed,
    }
    return existing_file_state(path, converted_attrs, wanted)[0] == "match"


def write_hdf5(
    path: Path,
    splits: dict[str, tuple[np.ndarray, np.ndarray]],
    categories: Sequence[str],
    attrs: dict[str, Any],
) -> None:
    """Write the splits to a temporary file beside `path`, then move it into place."""
    with atomic_file(path) as temporary, h5py.File(temporary, "w") as file:
        for split, (binary, labels) in splits.items():
            file.create_dataset(
                f"{split}/binary",
                data=binary,
                compression="gzip",
                chunks=(min(len(binary), 256) or 1, *binary.shape[1:]),
            )
            file.create_dataset(f"{split}/labels", data=labels)
        file.create_dataset("categories", data=list(categories), dtype=h5py.string_dtype("utf-8"))
        file.attrs.update(attrs)


def split_indices(
    grouped: dict[str, list[SketchFile]], seed: int, left_out: set[int]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per split, (indices into the flat file list, labels), round-robin over categories."""
    first_of_category = np.cumsum([0] + [len(members) for members in grouped.values()])
    members: dict[str, list[list[int]]] = {"train": [], "test": []}
    for category, files in grouped.items():
        train, test = split_category([file.name for file in files], seed, category)
        members["train"].append(train)
        members["test"].append(test)
    splits = {}
    for split, per_category in members.items():
        order = [
            (int(first_of_category[category]) + member, category)
            for category, member in round_robin(per_category)
            if int(first_of_category[category]) + member not in left_out
        ]
        indices = np.array([index for index, _ in order], dtype=np.int64)
        labels = np.array([category for _, category in order], dtype=np.int64)
        splits[split] = (indices, labels)
    return splits


def decode_source(
    source: FolderSource | ZipSource,
    files: Sequence[SketchFile],
    resolution: int,
    dilation: int,
    workers: int,
) -> tuple[np.ndarray, dict[int, str], set[tuple[int, int]]]:
    """Binary images uint8 `[N, R, R]`, the errors by index, and the image sizes seen."""
    binary = np.zeros((len(files), resolution, resolution), dtype=np.uint8)  # [N, R, R]
    errors: dict[int, str] = {}
    sizes: set[tuple[int, int]] = set()
    keys = [file.key for file in files]
    with tqdm(total=len(files), desc=f"sketch {source.name}", unit="img", disable=None) as bar:
        for decoded in decode_all(source, keys, resolution, dilation, workers):
            if decoded.error is not None:
                errors[decoded.index] = decoded.error
            else:
                binary[decoded.index] = decoded.binary
                sizes.add(decoded.size)
            bar.update(1)
    return binary, errors, sizes


def convert_sketch(
    source_path: Path | str,
    data_dir: Path | str = "data",
    resolution: int = 56,
    seed: int = 0,
    dilation: int | None = None,
    force: bool = False,
    workers: int = 1,
    skip_corrupt: bool = False,
) -> tuple[Path, bool]:
    """Convert the PNGs at `source_path` to HDF5; returns (path, whether it was written)."""
    if resolution < 1 or (dilation is not None and dilation < 1):
        raise ConfigError("--resolution and --dilation must be positive integers")
    dilation = default_dilation(resolution) if dilation is None else dilation
    target = output_path(data_dir, resolution, dilation, seed)
    if not force and is_converted(target, resolution, dilation, seed):
        return target, False

    source_path = Path(source_path)
    if not source_path.exists():
        raise MissingDataError(f"{source_path} does not exist; download {PUBLISHED}")
    source = open_source(source_path)
    try:
        grouped = sorted_categories(source.files(), str(source_path))
        files = [file for members in grouped.values() for file in members]
        splits = split_indices(grouped, seed, left_out=set())  # fails early on tiny categories
        binary, errors, sizes = decode_source(source, files, resolution, dilation, workers)
        corrupt = [
            f"{source.describe(files[index].key)}: {errors[index]}" for index in sorted(errors)
        ]
    finally:
        source.close()
    if corrupt and not skip_corrupt:
        raise CorruptImagesError(
            f"{len(corrupt)} corrupt image(s) in {source_path}:\n  "
            + "\n  ".join(corrupt)
            + "\nre-download the archive, or pass --skip-corrupt to leave them out"
        )
    # The split is made on the full file list, so a skipped image moves no other image.
    splits = split_indices(grouped, seed, left_out=set(errors))
    arrays = {split: (binary[indices], labels) for split, (indices, labels) in splits.items()}
    attrs = {
        "format_version": FORMAT_VERSION,
        "dataset": "TU-Berlin Sketch (Eitz, Hays & Alexa 2012)",
        "source": source.name,
        "resolution": resolution,
        "dilation": dilation,
        "seed": seed,
        **RULES,
        "n_categories": len(grouped),
        "n_images": len(files) - len(errors),
        "n_train": len(arrays["train"][0]),
        "n_test": len(arrays["test"][0]),
        "source_image_sizes": ",".join(f"{height}x{width}" for height, width in sorted(sizes)),
        "skipped_corrupt": json.dumps(corrupt),
        "torchvision_version": torchvision.__version__,
    }
    write_hdf5(target, arrays, list(grouped), attrs)
    return target, True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        type=Path,
        required=True,
        help="sketches_png.zip, or the unpacked folder (png/<category>/<n>.png)",
    )
    parser.add_argument("--resolution", type=int, default=56, help="output side (28, 56, 64)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-category split")
    parser.add_argument(
        "--dilation",
        type=int,
        default=None,
        help="max-filter side at full size (default ceil(1111 / resolution))",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    parser.add_argument(
        "--workers",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="decoding processes (default min(4, cpu count))",
    )
    parser.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="leave undecodable images out (listed in the file's attrs)",
    )


def run(args: argparse.Namespace) -> int:
    target, written = convert_sketch(
        args.source,
        args.data_dir,
        args.resolution,
        args.seed,
        args.dilation,
        args.force,
        args.workers,
        args.skip_corrupt,
    )
    with h5py.File(target, "r") as file:
        attrs = plain_attrs(file.attrs)
    counts = (
        f"{attrs['n_train']} train / {attrs['n_test']} test, {attrs['n_categories']} categories"
    )
    if not written:
        print(
            f"{target} already exists with these options ({counts}, from {attrs['source']}); "
            "nothing to do (pass --force to rebuild)"
        )
        return 0
    skipped = json.loads(attrs["skipped_corrupt"])
    for line in skipped:
        print(f"skipped corrupt image: {line}")
    print(f"wrote {target} ({counts}; {len(skipped)} corrupt image(s) skipped)")
    return 0
