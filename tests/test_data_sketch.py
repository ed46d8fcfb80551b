"""TU-Berlin Sketch: the stroke rule, the split, folder/zip conversion and the loader."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.helpers import compose_config
from tests.sketch_fixture import write_sketch_tree, write_sketch_zip
from vgp_bench.data.sketch import default_dilation, load_sketch, output_path
from vgp_bench.data.sketch_convert import (
    CorruptImagesError,
    add_arguments,
    convert_sketch,
    dilate,
    held_out_count,
    run,
    sketch_to_binary,
    split_category,
    stroke_mask,
)
from vgp_bench.errors import CorruptDataError, MissingDataError
from vgp_bench.run.commands.train import train

REPO = Path(__file__).resolve().parents[1]
CATEGORIES, PER_CATEGORY, SIZE = 3, 10, 256
DILATION = 5  # ceil(256 / 56): the default rule applied to the reduced fixture size


@pytest.fixture(scope="module")
def sketch_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 categories x 10 sketches of 256x256 under `png/`, plus `sketches_png.zip`."""
    root = tmp_path_factory.mktemp("sketch_source")
    write_sketch_tree(root, CATEGORIES, PER_CATEGORY, SIZE, seed=0)
    write_sketch_zip(root, root / "sketches_png.zip")
    return root


def read_h5(path: Path) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    with h5py.File(path, "r") as file:
        arrays = {
            name: file[name][()]
            for name in ("train/binary", "train/labels", "test/binary", "test/labels", "categories")
        }
        return arrays, dict(file.attrs)


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return run(parser.parse_args(argv))


# --- the stroke rule ----------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", [1, 2, 3, 5, 8, 16, 20, 21])
def test_dilate_matches_a_max_pool(kernel: int) -> None:
    generator = torch.Generator().manual_seed(kernel)
    mask = torch.rand(67, 53, generator=generator) < 0.02  # [H, W]
    before, after = (kernel - 1) // 2, kernel // 2
    padded = F.pad(mask[None, None].float(), (before, after, before, after))
    reference = F.max_pool2d(padded, kernel, stride=1)[0, 0] > 0.5  # [H, W]
    assert torch.equal(dilate(mask, kernel), reference)


def test_strokes_are_pixels_darker_than_the_mean() -> None:
    grey = torch.tensor([[[255, 255, 0], [200, 255, 255]]], dtype=torch.uint8)  # mean 201.7
    expected = torch.tensor([[False, False, True], [True, False, False]])
    assert torch.equal(stroke_mask(grey), expected)
    assert not stroke_mask(torch.full((1, 4, 4), 255, dtype=torch.uint8)).any()  # blank page


@pytest.mark.parametrize("resolution", [28, 56, 64])
def test_one_pixel_lines_survive_the_resize(resolution: int) -> None:
    """Default dilation: a 1-pixel line at 1111 leaves a line with no gap at `resolution`."""
    size, dilation = 1111, default_dilation(resolution)
    start, stop = round(0.2 * resolution), round(0.8 * resolution)  # output cells spanned
    for offset in (300, 517, 555, 602):
        horizontal = torch.full((1, size, size), 255, dtype=torch.uint8)
        horizontal[0, offset, 200:900] = 0
        binary = sketch_to_binary(horizontal, resolution, dilation)  # [R, R]
        assert binary[:, start:stop].amax(dim=0).all()
        assert binary.sum(dim=0).max() <= 3  # still a thin line
        assert torch.equal(
            sketch_to_binary(horizontal.transpose(1, 2), resolution, dilation), binary.T
        )
        diagonal = torch.full((1, size, size), 255, dtype=torch.uint8)
        steps = torch.arange(200, 900)
        diagonal[0, steps, steps + (offset - 555) // 4] = 0  # 45 degrees, inside the page
        binary = sketch_to_binary(diagonal, resolution, dilation)
        assert binary[start:stop].amax(dim=1).all()


# --- the split ----------------------------------------------------------------------------------


def test_split_is_9_to_1_per_category_and_seeded() -> None:
    assert [held_out_count(n) for n in (5, 10, 14, 15, 80)] == [1, 1, 1, 2, 8]
    names = sorted(f"{number}.png" for number in range(1, 81))
    train, test = split_category(names, seed=0, category="bear (animal)")
    assert (len(train), len(test)) == (72, 8)
    assert sorted(train + test) == list(range(80))
    assert split_category(names, 0, "bear (animal)") == (train, test)
    assert split_category(names, 1, "bear (animal)")[1] != test
    assert split_category(names, 0, "airplane")[1] != test
    with pytest.raises(ValueError, match="at least 5"):
        split_category(names[:4], 0, "airplane")


# --- conversion ---------------------------------------------------------------------------------


def test_folder_and_zip_give_the_same_file(sketch_tree: Path, tmp_path: Path) -> None:
    sources = {
        "folder": sketch_tree,  # holds png/
        "categories": sketch_tree / "png",  # holds the category folders
        "zip": sketch_tree / "sketches_png.zip",
    }
    contents = {}
    for name, source in sources.items():
        path, written = convert_sketch(source, tmp_path / name, dilation=DILATION)
        assert written and path == output_path(tmp_path / name, 56, DILATION, 0)
        contents[name] = read_h5(path)
    arrays, attrs = contents["zip"]
    for name in ("folder", "categories"):
        other_arrays, other_attrs = contents[name]
        assert other_arrays.keys() == arrays.keys()
        for key in arrays:
            assert np.array_equal(other_arrays[key], arrays[key]), key
        assert {k: v for k, v in other_attrs.items() if k != "source"} == {
            k: v for k, v in attrs.items() if k != "source"
        }
    assert attrs["source"] == "sketches_png.zip"
    assert [name.decode() for name in arrays["categories"]] == [
        "airplane",
        "bear (animal)",
        "flying saucer",
    ]
    assert arrays["train/binary"].shape == (27, 56, 56)
    assert arrays["test/binary"].shape == (3, 56, 56)
    assert np.bincount(arrays["train/labels"]).tolist() == [9, 9, 9]
    assert np.bincount(arrays["test/labels"]).tolist() == [1, 1, 1]
    assert arrays["train/labels"][:6].tolist() == [0, 1, 2, 0, 1, 2]  # round-robin order
    assert set(np.unique(arrays["train/binary"]).tolist()) == {0, 1}
    assert (arrays["train/binary"].reshape(27, -1).sum(axis=1) > 0).all()  # strokes kept
    assert (attrs["n_train"], attrs["n_test"], attrs["resolution"]) == (27, 3, 56)
    assert (attrs["dilation"], attrs["seed"], attrs["format_version"]) == (DILATION, 0, 1)
    assert attrs["source_image_sizes"] == "256x256"
    assert attrs["threshold_rule"] and attrs["stroke_rule"] and attrs["split_rule"]


def test_rerun_is_a_no_op_and_other_options_write_another_file(
    sketch_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--source", str(sketch_tree), "--data-dir", str(tmp_path), "--dilation", "5"]
    assert cli([*argv, "--workers", "1"]) == 0
    first = output_path(tmp_path, 56, 5, 0)
    stamp = first.stat().st_mtime_ns
    capsys.readouterr()
    assert cli([*argv, "--workers", "1"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert first.stat().st_mtime_ns == stamp
    assert cli([*argv, "--workers", "1", "--force"]) == 0
    assert "wrote" in capsys.readouterr().out
    stamp = first.stat().st_mtime_ns
    assert cli([*argv, "--workers", "1", "--seed", "1", "--resolution", "28"]) == 0
    second = output_path(tmp_path, 28, 5, 1)
    assert second.exists() and first.stat().st_mtime_ns == stamp
    assert read_h5(second)[0]["train/binary"].shape == (27, 28, 28)
    assert sorted(path.name for path in tmp_path.iterdir()) == [second.name, first.name]


def test_broken_pngs_are_reported_by_path_and_nothing_is_written(
    sketch_tree: Path, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    shutil.copytree(sketch_tree / "png", source / "png")
    broken = [source / "png" / "bear (animal)" / "11.png", source / "png" / "airplane" / "3.png"]
    broken[0].write_bytes(broken[0].read_bytes()[:200])  # truncated
    broken[1].write_bytes(b"not a png at all")
    data_dir = tmp_path / "data"
    with pytest.raises(CorruptImagesError) as caught:
        convert_sketch(source, data_dir, dilation=DILATION)
    message = str(caught.value)
    assert message.startswith("2 corrupt image(s)")
    assert all(str(path) in message for path in broken) and "--skip-corrupt" in message
    assert not data_dir.exists() or not any(data_dir.iterdir())

    path, _ = convert_sketch(source, data_dir, dilation=DILATION, skip_corrupt=True)
    attrs = read_h5(path)[1]
    skipped = json.loads(attrs["skipped_corrupt"])
    assert len(skipped) == 2 and str(broken[0]) in skipped[1]
    assert (attrs["n_images"], attrs["n_train"] + attrs["n_test"]) == (28, 28)
    assert sorted(path.name for path in data_dir.iterdir()) == [path.name]  # no temp files


def test_a_broken_zip_member_is_named_inside_the_archive(sketch_tree: Path, tmp_path: Path) -> None:
    archive_path = tmp_path / "sketches_png.zip"
    with (
        zipfile.ZipFile(sketch_tree / "sketches_png.zip") as original,
        zipfile.ZipFile(archive_path, "w") as archive,
    ):
        for member in original.namelist():
            data = original.read(member)
            archive.writestr(member, data[:100] if member.endswith("/21.png") else data)
    with pytest.raises(CorruptImagesError, match=r"^1 corrupt image") as caught:
        convert_sketch(archive_path, tmp_path / "data", dilation=DILATION)
    assert f"{archive_path}:png/flying saucer/21.png" in str(caught.value)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_a_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"sketches_png\.zip"):
        convert_sketch(tmp_path / "nowhere.zip", tmp_path / "data")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no PNG files"):
        convert_sketch(tmp_path / "empty", tmp_path / "data")


@pytest.mark.slow
def test_full_size_sketches_in_a_process_pool(tmp_path: Path) -> None:
    """1111x1111 sketches with the default dilation; 2 workers give the bytes of 1."""
    write_sketch_tree(tmp_path / "source", categories=2, per_category=10, size=1111, seed=3)
    one, _ = convert_sketch(tmp_path / "source", tmp_path / "one", workers=1)
    two, _ = convert_sketch(tmp_path / "source", tmp_path / "two", workers=2)
    arrays, attrs = read_h5(one)
    for key, values in read_h5(two)[0].items():
        assert np.array_equal(values, arrays[key]), key
    assert attrs["dilation"] == 20 and attrs["source_image_sizes"] == "1111x1111"
    ink = arrays["train/binary"].reshape(18, -1).mean(axis=1)  # share of stroke pixels
    assert ((ink > 0.02) & (ink < 0.4)).all()


# --- loading ------------------------------------------------------------------------------------


def test_missing_file_names_the_source_and_the_command(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as caught:
        load_sketch(str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    assert "vgp-data sketch --source /path/to/sketches_png.zip" in message
    assert "https://cybertron.cg.tu-berlin.de/eitz/projects/classifysketch/" in message
    assert "Eitz, Hays & Alexa 2012" in message and "How do humans sketch objects?" in message
    assert str(output_path(tmp_path, 56, 20, 0)) in message


def test_corrupt_file_names_the_rebuild_command(tmp_path: Path) -> None:
    output_path(tmp_path, 56, 20, 0).write_bytes(b"\x89HDF garbage")
    with pytest.raises(CorruptDataError, match=r"vgp-data sketch --source .* --force"):
        load_sketch(str(tmp_path))


def test_loader_gives_fixed_binary_splits(sketch_tree: Path, tmp_path: Path) -> None:
    convert_sketch(sketch_tree / "sketches_png.zip", tmp_path, dilation=DILATION)
    bundle = load_sketch(str(tmp_path), dilation=DILATION)
    assert bundle.valid is None and bundle.x_shape == (1, 56, 56)
    assert bundle.train.images.shape == (27, 1, 56, 56) and bundle.test.images.shape[0] == 3
    assert not bundle.train.dynamic and bundle.train.labels.dtype == torch.int64
    batch = next(bundle.train.batches(8))  # [B, 1, H, W]
    assert batch.dtype == torch.float32 and set(batch.unique().tolist()) == {0.0, 1.0}
    assert bundle.info["name"] == "sketch"
    assert bundle.info["binarization"] == "fixed (stroke rule)"
    assert bundle.info["split_sizes"] == {"train": 27, "test": 3}
    assert bundle.info["preprocessing"]["dilation"] == DILATION
    json.dumps(bundle.info)  # goes into metrics.json as it is

    small = load_sketch(str(tmp_path), dilation=DILATION, subset=4)
    assert small.split_sizes() == {"train": 4, "test": 3}
    assert small.train.labels.tolist() == [0, 1, 2, 0]
    by_path = load_sketch(str(tmp_path), path=output_path(tmp_path, 56, DILATION, 0).name)
    assert torch.equal(by_path.test.images, bundle.test.images)


def test_dataset_config_builds_the_loader(sketch_tree: Path, tmp_path: Path) -> None:
    convert_sketch(sketch_tree, tmp_path, dilation=DILATION)
    config = OmegaConf.load(REPO / "configs" / "dataset" / "sketch.yaml")
    config.dilation = DILATION
    bundle = instantiate(config)(data_dir=str(tmp_path))
    assert bundle.split_sizes() == {"train": 27, "test": 3}


# --- Table 2 experiments: one training step of DRAW on the fixture ------------------------------

TINY_DRAW = [
    "model.steps=2",
    "model.encoder_size=8",
    "model.decoder_size=8",
    "model.z_dim=3",
    "trainer.max_steps=1",
    "trainer.batch_size=9",
    "trainer.progress=false",
    "trainer.image_every=0",
    "eval.is_samples=2",
    "eval.chunk_size=2",
    "eval.batch_size=3",
    "eval.subset=3",
    "device=cpu",
]


@pytest.mark.parametrize("experiment", ["table2_draw_vae", "table2_draw_vgp"])
def test_table2_experiment_trains_one_step_on_the_fixture(
    experiment: str, sketch_tree: Path, tmp_path: Path
) -> None:
    convert_sketch(sketch_tree, tmp_path / "data", dilation=DILATION)
    overrides = [
        f"experiment={experiment}",
        f"data_dir={tmp_path / 'data'}",
        f"dataset.dilation={DILATION}",
        *TINY_DRAW,
    ]
    if experiment.endswith("vgp"):
        overrides += ["inference.variational_data_size=8", "inference.aux_hidden_dims=[8]"]
    cfg = compose_config(overrides)
    assert (cfg.model.steps, cfg.model.read_size, cfg.model.write_size) == (2, 2, 5)
    metrics = train(cfg, tmp_path / "run")
    assert metrics["status"] == "finished" and metrics["steps"] == 1
    assert metrics["dataset"]["name"] == "sketch"
    assert metrics["dataset"]["split_sizes"] == {"train": 27, "test": 3}
    assert metrics["experiment"] == experiment
    assert metrics["test"]["is_samples"] == 2 and math.isfinite(metrics["test"]["nll"])
