"""Active units and posterior spreads of a trained run, per latent group, on validation images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, compose_config
from tests.test_contract import TINY_INFERENCE, TINY_MODEL
from vgp_bench.analysis import posterior_statistics
from vgp_bench.analysis.posterior_statistics import (
    coordinate_activity,
    group_statistics,
    posterior_moments,
)
from vgp_bench.distributions import positive_scale
from vgp_bench.errors import ConfigError
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.loop.build import checkpoint_config, components_from_checkpoint
from vgp_bench.run.process.runtime import make_generator

TWO_LAYERS = [
    *[option for option in TINY if not option.startswith("model.")],
    "model.latent_dims=[3,2]",
    "model.hidden_dims=[[16],[8]]",
    "eval.at_end=false",
]


@pytest.fixture(scope="module")
def two_layer_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("two_layers")
    train(compose_config(TWO_LAYERS), folder)
    return folder / "checkpoints" / "best.pt"


def test_the_activity_of_draws_means_loses_the_draws_own_noise() -> None:
    # u = a_x + noise: coordinate 0 follows x (Cov_x = 1), coordinate 1 does not (Cov_x = 0),
    # both with Var_q(u | x) = 1; a 4-draw mean alone would put 1/4 on coordinate 1
    generator = torch.Generator().manual_seed(0)
    images, draws = 20000, 4
    centres = torch.randn(images, 2, generator=generator, dtype=torch.float64)
    centres[:, 1] = 0.0
    samples = centres + torch.randn(draws, images, 2, generator=generator, dtype=torch.float64)
    naive = samples.mean(0).var(0)
    activity = coordinate_activity(samples.mean(0), samples.var(0), draws)
    assert naive[1] == pytest.approx(0.25, abs=0.02)
    assert activity[0] == pytest.approx(1.0, abs=0.04)
    assert abs(float(activity[1])) < 0.01
    # grouped: [calls = 1, N, D]
    stats = group_statistics(
        samples.mean(0)[None], samples.var(0)[None], draws, {"active": 1, "idle": 1}
    )
    assert stats["active"]["active_units"] == 1 and stats["idle"]["active_units"] == 0
    assert stats["idle"]["posterior_std"] == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="do not cover"):
        group_statistics(samples.mean(0)[None], samples.var(0)[None], draws, {"z": 3})


def test_a_two_layer_run_is_measured_per_layer_as_its_encoder_says(
    two_layer_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "statistics.json"
    code = posterior_statistics.main(
        [str(two_layer_checkpoint), "--examples=16", "--draws=4000", f"--out={out}"]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert record["split"] == "valid" and record["examples"] == 16
    (run,) = record["runs"]
    assert set(run["groups"]) == {"z/z1", "z/z2"}
    assert run["groups"]["z/z1"]["dims"] == 3 and run["groups"]["z/z2"]["dims"] == 2
    assert run["head"] == {}  # the mean-field head has no statistics of its own
    # the exact answer from the mean-field encoder: E_q[z | x] is its mean, its spread sigma
    checkpoint = load_checkpoint(two_layer_checkpoint)
    parts = components_from_checkpoint(checkpoint_config(checkpoint, "cpu"), checkpoint)
    valid = parts.data.valid
    assert valid is not None
    with torch.no_grad():
        context = parts.model.recognition_context(valid.gather(torch.arange(16)))
        head = parts.heads["z"]
        mean, raw_scale = head.parameter_net(context).chunk(2, dim=-1)  # [16, 5]
        scale = positive_scale(raw_scale, head.min_scale)
    # the CLI's draws again (the same seed): each coordinate's activity near the exact one
    means, variances = posterior_moments(
        parts.model,
        parts.heads,
        valid.subset(16),
        4000,
        make_generator(parts.device, 0),
        parts.device,
    )["z"]
    activity = coordinate_activity(means, variances, 4000)[0]  # [5]
    exact_activity = mean.double().var(0)
    assert torch.allclose(activity, exact_activity, atol=2e-3)
    for name, columns in (("z/z1", slice(0, 3)), ("z/z2", slice(3, 5))):
        measured = run["groups"][name]
        assert measured["activity"] == pytest.approx(float(activity[columns].sum()), abs=1e-9)
        assert measured["active_units"] == int((activity[columns] > 0.01).sum())
        expected_std = float(scale[:, columns].double().pow(2).mean(0).sqrt().mean())
        assert measured["posterior_std"] == pytest.approx(expected_std, rel=0.03)
    # the tables again from the JSON, identical to those printed
    printed = capsys.readouterr().out
    assert posterior_statistics.main([str(out), "--render"]) == 0
    assert capsys.readouterr().out == printed
    assert "| z/z1 |" in printed and "of 3 |" in printed


def test_a_vgp_run_adds_its_warp_statistics(tmp_path: Path) -> None:
    options = [
        *[option for option in TINY if not option.startswith("inference=")],
        "inference=vgp",
        "inference.variational_data_size=8",
        "inference.aux_hidden_dims=[8]",
        "eval.at_end=false",
    ]
    train(compose_config(options), tmp_path)
    record = posterior_statistics.checkpoint_statistics(
        tmp_path / "checkpoints" / "best.pt",
        examples=16,
        draws=8,
        head_examples=8,
        head_draws=64,
        seed=0,
    )
    assert set(record["groups"]) == {"z/z1"}
    assert record["head"]["z/warp_rank"] == 3
    assert record["head"]["z/total_correlation"] >= 0.0
    # the same seed, the same numbers
    again = posterior_statistics.checkpoint_statistics(
        tmp_path / "checkpoints" / "best.pt", 16, 8, 8, 64, 0
    )
    assert again == record


def test_bad_input_fails_with_one_line(
    two_layer_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(*argv: str) -> str:
        assert posterior_statistics.main(list(argv)) == 2
        error = capsys.readouterr().err
        assert error.startswith("error: ") and error.count("\n") == 1, error
        return error

    assert "not found" in fails(str(tmp_path / "nowhere" / "best.pt"))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint")
    assert "unreadable" in fails(str(corrupt))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    assert "has no config, model, heads" in fails(str(foreign))
    # --render wants a JSON file: a missing one, or a checkpoint given by mistake
    fails(str(tmp_path / "missing.json"), "--render")
    fails(str(two_layer_checkpoint), "--render")
    for argv in (
        ["--draws=1"],
        ["--head-draws=1"],
        ["--merge"],
        ["--render", str(two_layer_checkpoint)],
    ):
        with pytest.raises(SystemExit):
            posterior_statistics.main([str(two_layer_checkpoint), *argv])


def test_fewer_images_than_asked_are_recorded_and_merges_keep_other_runs(
    two_layer_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = tmp_path / "statistics.json", tmp_path / "statistics.md"
    argv = [str(two_layer_checkpoint), "--examples=5000", "--draws=4", f"--out={out}"]
    assert posterior_statistics.main([*argv, f"--markdown={table}"]) == 0
    assert table.read_text() == capsys.readouterr().out  # the file is what was printed
    record = json.loads(out.read_text())
    (run,) = record["runs"]
    assert record["examples"] == 5000 and run["images"] == 16 and run["head_images"] == 16
    assert "| two_layers0 | 8 | 16 | z/z1 |" in table.read_text()
    # another run merged in keeps the first; measuring the first again replaces it in place
    record["runs"].insert(0, {**run, "run": "another", "step": 1})
    out.write_text(json.dumps(record))
    assert posterior_statistics.main([*argv, "--merge"]) == 0
    merged = json.loads(out.read_text())
    assert [(r["run"], r["step"]) for r in merged["runs"]] == [("another", 1), ("two_layers0", 8)]
    # a file measured with other settings is not mixed with these
    assert posterior_statistics.main([*argv[:-2], "--draws=8", f"--out={out}", "--merge"]) == 2
    assert "other settings (draws)" in capsys.readouterr().err
    assert json.loads(out.read_text()) == merged


def test_a_site_the_model_never_draws_is_an_error(two_layer_checkpoint: Path) -> None:
    checkpoint = load_checkpoint(two_layer_checkpoint)
    parts = components_from_checkpoint(checkpoint_config(checkpoint, "cpu"), checkpoint)
    assert parts.data.valid is not None
    heads = torch.nn.ModuleDict({**parts.heads, "unused": parts.heads["z"]})
    with pytest.raises(ConfigError, match=r"never drew sites \['unused'\]"):
        posterior_moments(
            parts.model, heads, parts.data.valid, 4, make_generator(parts.device, 0), parts.device
        )
    with pytest.raises(ValueError, match="at least 2"):
        posterior_moments(
            parts.model,
            parts.heads,
            parts.data.valid.subset(1),
            4,
            make_generator(parts.device, 0),
            parts.device,
        )


@pytest.mark.parametrize(
    ("model", "inference", "dims"),
    [("draw", "vgp", 9), ("dlgm1", "hvi", 3), ("dlgm1", "planar_flow", 3)],
)
def test_every_family_on_every_model_is_measured(
    model: str, inference: str, dims: int, tmp_path: Path
) -> None:
    options = [
        *[option for option in TINY if not option.startswith(("model.", "inference="))],
        f"model={model}",
        *TINY_MODEL[model],
        f"inference={inference}",
        *TINY_INFERENCE[inference],
        "eval.at_end=false",
        "trainer.epochs=1",
    ]
    train(compose_config(options), tmp_path)
    record = posterior_statistics.checkpoint_statistics(
        tmp_path / "checkpoints" / "best.pt", 8, 4, 4, 16, 0
    )
    # DRAW's site is drawn once per step (3 steps of 3 coordinates): every step counts
    (group,) = record["groups"].values()
    assert group["dims"] == dims and 0 <= group["active_units"] <= dims
    assert group["posterior_std"] > 0
    assert bool(record["head"]) == (inference == "vgp")
