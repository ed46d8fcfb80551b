"""Where the bound goes: warp statistics per epoch, the auxiliary gap, PSIS k-hat in metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch import nn

from tests.helpers import TINY, compose_config
from vgp_bench.analysis.report import main as report_main
from vgp_bench.analysis.report import validation_curves
from vgp_bench.diagnostics import evaluation_mode
from vgp_bench.run.commands.train import train

TINY_VGP = [
    *[option for option in TINY if not option.startswith("inference=")],
    "inference=vgp",
    "inference.variational_data_size=8",
    "inference.aux_hidden_dims=[8]",
    "trainer.diagnostics_examples=8",
    "eval.aux_gap_examples=6",
    "eval.aux_gap_samples=16",
    "eval.aux_gap_draws=3",
    "eval.aux_gap_budget=full",  # a tiny run's budget would skip it
    "eval.is_samples=40",
]


def test_a_vgp_run_records_warp_statistics_gap_and_reliability(tmp_path: Path) -> None:
    train(compose_config(TINY_VGP), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for entry in metrics["history"]:
        assert entry["z/warp_rank"] == 3  # identity prior mean: every direction
        assert entry["z/warp_share"] > 0 and entry["z/nonlinear_warp_share"] >= 0
        assert entry["z/variance_dispersion"] >= 0 and entry["z/total_correlation"] >= 0
    test = metrics["test"]
    assert test["aux_gap_examples"] == 6 and test["aux_gap_samples"] == 16
    # K auxiliary samples tighten the bound in expectation; Monte Carlo noise stays small here
    assert test["aux_gap"] > -3 * test["aux_gap_stderr"] - 1e-3
    assert abs(test["bound_gap"] - (test["bound_nll"] - test["nll"])) < 1e-9
    assert 0.0 <= test["pareto_k_above_0_7"] <= 1.0 and test["pareto_k_max"] is not None
    assert "collapsed" in test["weight"]["z"]
    assert metrics["structure"] == "global T, identity mean, sigma=0.1 s, m=8"


def test_the_report_shows_where_the_bound_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train(compose_config(TINY_VGP), tmp_path / "vgp")
    train(compose_config([*TINY, "eval.is_samples=40"]), tmp_path / "vae")
    assert report_main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    gaps = text[text.index("Where the bound goes") :]
    vgp_row = next(line for line in gaps.splitlines() if "VGP" in line)
    vae_row = next(line for line in gaps.splitlines() if "VAE" in line)
    assert "identity mean" in vgp_row and vgp_row.count("—") == 0  # every column measured
    assert vae_row.count("—") == 6  # no auxiliary model, no warp
    assert report_main([str(tmp_path), "--format", "csv"]) == 0
    assert "gaps:synthetic" in capsys.readouterr().out
    curves = tmp_path / "curves.png"
    assert report_main([str(tmp_path), "--curves", str(curves)]) == 0
    series = validation_curves([tmp_path / "vgp", tmp_path / "vae"])
    assert sorted(series) == [
        "DLGM 1hl + VAE",
        "DLGM 1hl + VGP (global T, identity mean, sigma=0.1 s, m=8)",
    ]
    assert [epoch for epoch, _ in series["DLGM 1hl + VAE"]] == [1, 2]
    assert curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_vae_run_has_reliability_but_no_vgp_statistics(tmp_path: Path) -> None:
    train(compose_config([*TINY, "eval.is_samples=40"]), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert not any(key.startswith("z/") for key in metrics["history"][-1])
    assert "aux_gap" not in metrics["test"] and "pareto_k_mean" in metrics["test"]


def test_evaluation_mode_gives_each_module_its_own_mode_back_even_on_error() -> None:
    model, heads = nn.Linear(2, 2), nn.ModuleDict({"z": nn.Linear(2, 2)})
    heads.eval()  # a mixed start: the model training, the heads not
    seen: list[tuple[bool, bool]] = []
    with pytest.raises(RuntimeError, match="inside"), evaluation_mode(model, heads):
        seen.append((model.training, heads["z"].training))
        raise RuntimeError("inside")
    assert seen == [(False, False)]
    assert model.training and not heads.training and not heads["z"].training


def test_measurements_leave_a_training_model_training() -> None:
    model, heads = nn.Linear(2, 2), nn.ModuleDict({"z": nn.Linear(2, 2)})
    with evaluation_mode(model, heads):
        with evaluation_mode(heads):  # nested, as evaluation inside training diagnostics
            assert not heads.training
        assert not heads.training and not model.training
    assert model.training and heads.training
