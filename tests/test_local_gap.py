"""The per-image approximation gap: families fitted alone to one image's posterior."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import TINY, compose_config
from vgp_bench.analysis import local_gap
from vgp_bench.run.commands.train import train


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    train(compose_config([*TINY, "eval.at_end=false"]), folder)
    return folder / "checkpoints" / "best.pt"


def test_every_q_is_measured_on_the_same_images(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gap.json"
    code = local_gap.main(
        [
            str(tiny_checkpoint),
            "--images=2",
            "--families",
            "mean_field",
            "planar_flow",
            "--steps=300",
            "--is-samples=400",
            f"--out={out}",
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert record["images"] == 2 and len(record["per_image"]) == 2
    assert set(record["summary"]) == {"amortized", "mean_field", "planar_flow"}
    for image in record["per_image"]:
        estimates = {name: image[name] for name in record["summary"]}
        log_likelihood = max(estimate["log_likelihood"] for estimate in estimates.values())
        for name, estimate in estimates.items():
            # every bound lies below the image's log p(x) (up to Monte Carlo noise), and the
            # IS estimate above its own bound
            assert estimate["bound"] <= log_likelihood + 0.05, name
            assert estimate["log_likelihood"] >= estimate["bound"] - 0.05, name
    # a mean-field q fitted to one image's posterior is at least as good as the encoder's
    # mean-field q for it (the amortization gap is not negative), on average
    summary = record["summary"]
    assert summary["mean_field"]["gap"] <= summary["amortized"]["gap"] + 0.1
    # the table again from the JSON, identical to the one printed
    printed = capsys.readouterr().out
    assert local_gap.main([str(out), "--render"]) == 0
    assert capsys.readouterr().out == printed
    assert "| mean_field |" in printed and "better on" in printed


def test_unknown_family_and_models_without_a_closed_form_joint_fail_clearly(
    tiny_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_gap.main([str(tiny_checkpoint), "--families", "nonsense", "--steps=1"]) == 2
    assert "unknown families ['nonsense']" in capsys.readouterr().err
    with pytest.raises(local_gap.ConfigError, match="closed form"):
        local_gap.posterior_log_density(object(), None)  # type: ignore[arg-type]


def test_help_lists_every_family_and_the_defaults_are_among_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        local_gap.main(["--help"])
    assert stopped.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert f"any of {', '.join(local_gap.families())}" in shown  # every configs/inference/ file
    assert set(local_gap.DEFAULT_FAMILIES) <= set(local_gap.families())
    assert f"(default: {' '.join(local_gap.DEFAULT_FAMILIES)})" in shown
