"""The shared store: atomic files with the umask's permissions, plain attrs, "already built"."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vgp_bench.data.base import ImageSplit, first_images
from vgp_bench.data.mnist import FORMAT_VERSION as MNIST_FORMAT
from vgp_bench.data.mnist import SPLITS, SplitArrays, read_mnist_h5
from vgp_bench.data.mnist_convert import write_mnist_h5
from vgp_bench.data.sketch_convert import is_converted, write_hdf5
from vgp_bench.data.store import existing_file_state, plain_attrs
from vgp_bench.data.synthetic import load_synthetic
from vgp_bench.errors import CorruptDataError
from vgp_bench.files import atomic_file


def tiny_mnist_splits() -> dict[str, SplitArrays]:
    rng = np.random.default_rng(0)
    return {
        split: SplitArrays(
            rng.integers(0, 256, (3, 28, 28)).astype(np.uint8),
            rng.integers(0, 2, (3, 28, 28)).astype(np.uint8),
            rng.integers(0, 10, 3).astype(np.int64),
        )
        for split in SPLITS
    }


def write_tiny_sketch(path: Path, resolution: int = 8) -> None:
    binary = np.zeros((4, resolution, resolution), dtype=np.uint8)
    splits = {split: (binary, np.array([0, 1, 0, 1])) for split in ("train", "test")}
    attrs = {"format_version": 1, "resolution": resolution, "dilation": 2, "seed": 0}
    write_hdf5(path, splits, ["a", "b"], attrs)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_dataset_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        write_mnist_h5(tmp_path / "mnist.h5", tiny_mnist_splits(), {"format_version": MNIST_FORMAT})
        write_tiny_sketch(tmp_path / "sketch.h5")
    finally:
        os.umask(previous)
    for name in ("mnist.h5", "sketch.h5"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnist.h5", "sketch.h5"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "file.h5"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_file(target) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("writer failed")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.h5"]


def test_plain_attrs_turns_numpy_scalars_into_python_values(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "a.h5", "w") as file:
        file.attrs.update({"count": 3, "ratio": 0.5, "flag": True, "name": "x"})
        attrs = plain_attrs(file.attrs)
    assert attrs == {"count": 3, "ratio": 0.5, "flag": True, "name": "x"}
    assert [type(attrs[key]) for key in ("count", "ratio", "flag", "name")] == [
        int,
        float,
        bool,
        str,
    ]


def test_existing_file_state_for_mnist(tmp_path: Path) -> None:
    path = tmp_path / "mnist.h5"
    attrs = {"format_version": MNIST_FORMAT, "sha256": "ab", "binarization_seed": 0}
    write_mnist_h5(path, tiny_mnist_splits(), attrs)

    def read(p: Path) -> dict:
        return read_mnist_h5(p)[0]

    assert existing_file_state(path, read, {"sha256": "ab", "binarization_seed": 0}) == (
        "match",
        "",
    )
    state, why = existing_file_state(path, read, {"sha256": "cd", "binarization_seed": 0})
    assert state == "different" and why == "sha256 'ab' (wanted 'cd')"
    path.write_bytes(b"not hdf5")
    state, why = existing_file_state(path, read, {"sha256": "ab"})
    assert state == "unreadable" and "vgp-data mnist --force" in why


def test_is_converted_needs_the_options_and_both_splits(tmp_path: Path) -> None:
    path = tmp_path / "sketch.h5"
    assert not is_converted(path, 8, 2, 0)  # absent
    write_tiny_sketch(path)
    assert is_converted(path, 8, 2, 0)
    assert not is_converted(path, 8, 3, 0)
    with h5py.File(path, "a") as file:
        del file["test/labels"]
    assert not is_converted(path, 8, 2, 0)


def test_first_images_keeps_a_prefix_of_every_split() -> None:
    images = torch.arange(5, dtype=torch.uint8).view(5, 1, 1, 1) % 2
    splits = {"train": ImageSplit(images, labels=torch.arange(5)), "test": ImageSplit(images[:2])}
    kept = first_images(splits, 3)
    assert [len(kept["train"]), len(kept["test"])] == [3, 2]
    assert kept["train"].labels.tolist() == [0, 1, 2]
    assert first_images(splits, None) is splits


@pytest.mark.parametrize("subset", [0, -2])
def test_a_subset_below_one_is_refused_naming_the_key(subset: int) -> None:
    with pytest.raises(ValueError, match=r"^dataset\.subset must be a positive number"):
        load_synthetic(subset=subset)


def test_a_binarization_other_than_fixed_or_dynamic_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^dataset\.binarization must be 'fixed' or 'dynamic'"):
        load_synthetic(binarization="stochastic")


def test_unreadable_is_reported_as_corrupt_data(tmp_path: Path) -> None:
    path = tmp_path / "mnist.h5"
    path.write_bytes(b"")
    with pytest.raises(CorruptDataError):
        read_mnist_h5(path)
