"""Binarized MNIST (50k/10k/10k): load data/mnist.h5, written by `vgp-data mnist`.

The file holds groups `train`, `valid`, `test`, each with `grey` uint8 `[N, 28, 28]` (0..255,
absent for .amat sources), `binary` uint8 `[N, 28, 28]` (0/1) and `labels` int64 `[N]` (-1
where unknown). The fixed binary set is one Bernoulli draw of grey / 255 with the torch seed
`3 * binarization_seed + split index` (train 0, valid 1, test 2), so one `--binarization-seed`
(default 0) fixes all three splits. The conversion lives in `mnist_convert`, its sources in
`mnist_sources`; training imports only this module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from vgp_bench.compat import OLD_MNIST_FORMATS, is_readable_old_mnist
from vgp_bench.data.base import (
    Binarization,
    DatasetBundle,
    ImageSplit,
    bernoulli_binarize,
    check_binarization,
    check_subset,
    first_images,
)
from vgp_bench.data.store import plain_attrs
from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError

FILE_NAME = "mnist.h5"
FORMAT_VERSION = 2
SPLITS = ("train", "valid", "test")
IMAGE_SIDE = 28
DEFAULT_EVAL_BINARIZATION_SEED = 12345
REBUILD_HINT = "rerun `vgp-data mnist --force`"


@dataclass
class SplitArrays:
    """One split as numpy arrays; `grey` is None when the source was already binary."""

    grey: np.ndarray | None  # [N, 28, 28] uint8, 0..255
    binary: np.ndarray | None  # [N, 28, 28] uint8, 0/1
    labels: np.ndarray  # [N] int64, -1 where unknown

    def __len__(self) -> int:
        return self.labels.shape[0]


def split_seed(binarization_seed: int, split: str) -> int:
    """The torch seed of one split's fixed Bernoulli draw: 3 * seed + split index."""
    return len(SPLITS) * binarization_seed + SPLITS.index(split)


# ------------------------------------------------------------------------------- HDF5 file


def readable_format(attrs: dict[str, Any]) -> bool:
    """Whether this code reads a file of the format its attrs state: the current one, or an
    older one that vgp_bench.compat still reads."""
    return attrs.get("format_version") == FORMAT_VERSION or is_readable_old_mnist(attrs)


def check_layout(handle: h5py.File, path: Path) -> dict[str, Any]:
    """The file's attrs after checking its format version, groups, shapes and dtypes."""
    attrs = plain_attrs(handle.attrs)
    version = attrs.get("format_version")
    if not readable_format(attrs):
        why = f" ({OLD_MNIST_FORMATS[version]})" if version in OLD_MNIST_FORMATS else ""
        raise CorruptDataError(
            f"{path} has format_version {version}, this code reads {FORMAT_VERSION}{why}: "
            f"{REBUILD_HINT}"
        )
    for split in SPLITS:
        if split not in handle:
            raise CorruptDataError(f"{path} has no '{split}' group: {REBUILD_HINT}")
        group = handle[split]
        names = ["binary", "labels"] + (["grey"] if attrs.get("binary_origin") != "amat" else [])
        for name in names:
            if name not in group:
                raise CorruptDataError(f"{path} has no '{split}/{name}' dataset: {REBUILD_HINT}")
        count = group["labels"].shape[0] if group["labels"].ndim == 1 else -1
        for name in names:
            dataset = group[name]
            expected = (count,) if name == "labels" else (count, IMAGE_SIDE, IMAGE_SIDE)
            dtype = np.int64 if name == "labels" else np.uint8
            if count < 1 or dataset.shape != expected or dataset.dtype != dtype:
                raise CorruptDataError(
                    f"{path}: '{split}/{name}' is {dataset.dtype} {dataset.shape}, expected "
                    f"{np.dtype(dtype)} {expected}: {REBUILD_HINT}"
                )
    return attrs


def content_sha256(splits: dict[str, SplitArrays]) -> str:
    """SHA-256 of every array the file holds (binary, grey, labels per split), as stored."""
    digest = hashlib.sha256()
    for split in SPLITS:
        arrays = splits[split]
        for name, array in (("binary", arrays.binary), ("grey", arrays.grey)):
            if array is not None:
                digest.update(f"{split}/{name}".encode())
                digest.update(np.ascontiguousarray(array, dtype=np.uint8).tobytes())
        digest.update(f"{split}/labels".encode())
        digest.update(np.ascontiguousarray(arrays.labels, dtype=np.int64).tobytes())
    return digest.hexdigest()


def check_values(path: Path, attrs: dict[str, Any], splits: dict[str, SplitArrays]) -> None:
    """Binary images hold only 0/1, labels are digits (or -1 when unknown), and the arrays
    match the content checksum stored when the file was written (files from before it was
    stored have none)."""
    for split, arrays in splits.items():
        assert arrays.binary is not None
        if int(arrays.binary.max()) > 1:
            raise CorruptDataError(
                f"{path}: '{split}/binary' holds values other than 0/1: {REBUILD_HINT}"
            )
        if arrays.labels.size and (arrays.labels.min() < -1 or arrays.labels.max() > 9):
            raise CorruptDataError(
                f"{path}: '{split}/labels' holds values outside -1..9: {REBUILD_HINT}"
            )
    stored = attrs.get("content_sha256")
    if stored is not None and stored != content_sha256(splits):
        raise CorruptDataError(
            f"{path}: its arrays do not match the content checksum stored with them (the file "
            f"was changed or damaged): {REBUILD_HINT}"
        )


def mnist_file(data_dir: str | Path, path: str | None = None) -> Path:
    """The loader's file, checked to exist; the error names the command that makes it there
    (`--data-dir` the folder used, or `--out` the file)."""
    file = Path(data_dir) / (path if path is not None else FILE_NAME)
    if not file.is_file():
        option = f"--data-dir {file.parent}" if path is None else f"--out {file}"
        raise MissingDataError(f"{file} not found: run `vgp-data mnist {option}`")
    return file


def check_mnist_file(data_dir: str | Path, path: str | None = None) -> None:
    """Check, before a run starts, that the loader's file exists and has the layout this code
    reads (attributes and shapes only: the values and checksum are checked on loading)."""
    file = mnist_file(data_dir, path)
    try:
        with h5py.File(file, "r") as handle:
            check_layout(handle, file)
    except CorruptDataError:
        raise
    except (OSError, KeyError, ValueError) as error:
        reason = " ".join(str(error).split())
        raise CorruptDataError(f"{file} cannot be read ({reason}): {REBUILD_HINT}") from None


def read_mnist_h5(path: Path) -> tuple[dict[str, Any], dict[str, SplitArrays]]:
    """Every array of data/mnist.h5 in memory, with its attrs; layout, values (binary 0/1,
    labels) and the stored content checksum checked."""
    try:
        with h5py.File(path, "r") as handle:
            attrs = check_layout(handle, path)
            splits = {}
            for split in SPLITS:
                group = handle[split]
                grey = group["grey"][()] if "grey" in group else None
                splits[split] = SplitArrays(grey, group["binary"][()], group["labels"][()])
    except CorruptDataError:
        raise
    except (OSError, KeyError, ValueError) as error:
        raise CorruptDataError(f"{path} cannot be read ({error}): {REBUILD_HINT}") from None
    check_values(path, attrs, splits)
    return attrs, splits


# ---------------------------------------------------------------------------------- loader


def binarize_once(grey: np.ndarray, eval_binarization_seed: int, split: str) -> np.ndarray:
    """One Bernoulli draw of an evaluation split's grey levels (dynamic binarization's valid
    and test), with the split's seed `3 * eval_binarization_seed + split index`."""
    seed = split_seed(eval_binarization_seed, split)
    return bernoulli_binarize(torch.from_numpy(np.ascontiguousarray(grey)), seed).numpy()


def to_images(array: np.ndarray) -> torch.Tensor:
    """uint8 [N, 28, 28] numpy to a uint8 tensor [N, 1, 28, 28]."""
    return torch.from_numpy(np.ascontiguousarray(array)).unsqueeze(1)


def load_mnist(
    data_dir: str,
    binarization: Binarization = "fixed",
    merge_valid: bool = False,
    path: str | None = None,
    eval_binarization_seed: int = DEFAULT_EVAL_BINARIZATION_SEED,
    subset: int | None = None,
    holdout: int | None = None,
) -> DatasetBundle:
    """Binarized MNIST from data/mnist.h5 as in-memory splits of uint8 `[N, 1, 28, 28]`.

    `fixed`: every split is the file's fixed binary draw. `dynamic`: train holds grey levels
    binarized afresh at every draw; valid and test are binarized once with torch seed
    `3 * eval_binarization_seed + split index` (valid 1, test 2). `merge_valid` appends valid
    to train (valid becomes None). `holdout` N pools train and valid (MNIST's 60,000 training
    images in their order) and holds out the last N as the validation split, as Burda et al.
    (2016) do with N = 400. `subset` keeps the first N images of each split. A relative `path`
    is taken inside `data_dir`.
    """
    check_binarization(binarization)
    check_subset(subset)
    if holdout is not None and (merge_valid or isinstance(holdout, bool) or holdout < 1):
        raise ConfigError(
            "dataset.holdout must be a positive number of images (with merge_valid=false), "
            f"got holdout={holdout!r}, merge_valid={merge_valid}"
        )
    file = mnist_file(data_dir, path)
    attrs, splits = read_mnist_h5(file)
    dynamic = binarization == "dynamic"
    if dynamic and any(arrays.grey is None for arrays in splits.values()):
        raise ConfigError(
            f"{file} has no grey levels (built from .amat files), so it cannot be binarized "
            "dynamically: use binarization=fixed, or rebuild it with `vgp-data mnist --force`"
        )

    pooled = merge_valid or holdout is not None  # valid is training data (all or in part)
    images: dict[str, np.ndarray] = {}
    for split, arrays in splits.items():
        if dynamic and (split == "train" or (pooled and split == "valid")):
            images[split] = arrays.grey  # binarized at every draw
        elif dynamic:
            images[split] = binarize_once(arrays.grey, eval_binarization_seed, split)
        else:
            images[split] = arrays.binary
    labels = {split: arrays.labels for split, arrays in splits.items()}
    if pooled:
        images["train"] = np.concatenate([images["train"], images.pop("valid")])
        labels["train"] = np.concatenate([labels["train"], labels.pop("valid")])
    if holdout is not None:
        if holdout >= len(images["train"]):
            raise ConfigError(
                f"dataset.holdout={holdout} leaves no training images (train and valid hold "
                f"{len(images['train'])})"
            )
        held_out = images["train"][-holdout:]
        images["valid"] = (
            binarize_once(held_out, eval_binarization_seed, "valid") if dynamic else held_out
        )
        labels["valid"] = labels["train"][-holdout:]
        images["train"], labels["train"] = images["train"][:-holdout], labels["train"][:-holdout]

    image_splits = {
        split: ImageSplit(
            to_images(array), dynamic=dynamic and split == "train",
            labels=torch.from_numpy(np.ascontiguousarray(labels[split])),
        )
        for split, array in images.items()
    }  # fmt: skip
    image_splits = first_images(image_splits, subset)
    bundle = DatasetBundle(
        train=image_splits["train"], test=image_splits["test"], valid=image_splits.get("valid")
    )
    bundle.info = {
        "name": "mnist",
        "binarization": binarization,
        "merge_valid": merge_valid,
        "holdout": holdout,
        "split_sizes": bundle.split_sizes(),
        "subset": subset,
        "path": str(file.resolve()),
        "source": attrs.get("source"),
        "sha256": attrs.get("sha256"),
        "binary_origin": attrs.get("binary_origin"),
        "binarization_seed": attrs.get("binarization_seed"),
        "eval_binarization_seed": eval_binarization_seed if dynamic else None,
        "format_version": attrs.get("format_version"),
        "content_sha256": attrs.get("content_sha256"),
    }
    return bundle
