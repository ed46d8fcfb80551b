"""trainer.early_stopping: Lightning's EarlyStopping on the validation bound, exact across
resume, the best checkpoint tested, the stop recorded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, compose_config
from vgp_bench.errors import ConfigError
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import RunState, load_checkpoint
from vgp_bench.run.loop.early_stopping import EarlyStopping, checkpoint_to_test


def test_patience_counts_epochs_without_a_gain_of_min_delta() -> None:
    rule, state = EarlyStopping(patience=2, min_delta=0.5), RunState()
    # gains: -100 (first), -99 (+1.0); then -98.8 (+0.2 < 0.5), -98.6 (+0.4 over -99): stop
    stops = [rule.observe(state, bound) for bound in (-100.0, -99.0, -98.8, -98.6)]
    assert stops == [False, False, False, True]
    assert state.gain_reference == -99.0 and state.epochs_without_gain == 2
    assert state.stop_reason == "early_stopping"
    state = RunState()
    assert not any(rule.observe(state, bound) for bound in (-100.0, -99.8, -99.4, -98.8))
    assert state.gain_reference == -98.8  # -99.4 beat -100 by 0.6, -98.8 beat -99.4 by 0.6


def test_a_nan_bound_never_gains_and_off_never_stops() -> None:
    state = RunState()
    assert not EarlyStopping(None).observe(state, math.nan)
    assert state.epochs_without_gain == 1
    for _ in range(100):
        assert not EarlyStopping(None).observe(state, -1.0 if state.step else -2.0)


def test_the_checkpoint_to_test_follows_early_stopping_unless_named() -> None:
    assert checkpoint_to_test(compose_config(TINY)) == "final"
    stopping = [*TINY, "trainer.early_stopping.patience=3"]
    assert checkpoint_to_test(compose_config(stopping)) == "best"
    assert checkpoint_to_test(compose_config([*stopping, "eval.checkpoint=final"])) == "final"


EARLY = [
    *TINY,
    "trainer.epochs=40",
    "trainer.early_stopping.patience=2",
    "trainer.early_stopping.min_delta=3.0",
    "trainer.checkpoint_every=3",
]


def test_an_early_stop_is_finished_and_tests_the_best_checkpoint(tmp_path: Path) -> None:
    metrics = train(compose_config(EARLY), tmp_path)
    assert metrics["status"] == "finished" and metrics["stop_reason"] == "early_stopping"
    epochs = metrics["epochs_completed"]
    assert epochs < 40
    bounds = [entry["valid_bound"] for entry in metrics["history"]]
    assert metrics["best_epoch"] == 1 + max(range(epochs), key=lambda i: bounds[i])
    assert metrics["test"]["checkpoint"] == "best.pt"
    assert metrics["test"]["epoch"] == metrics["best_epoch"]
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert best["state"]["epoch"] == metrics["best_epoch"]
    log = (tmp_path / "train.log").read_text()
    assert "early stopping after epoch" in log and "evaluating best.pt" in log
    # a second start finds the run finished: no more training
    again = train(compose_config(EARLY), tmp_path)
    assert again["epochs_completed"] == epochs and again["stop_reason"] == "early_stopping"


def test_early_stopping_is_exact_across_resume(tmp_path: Path) -> None:
    straight = train(compose_config(EARLY), tmp_path / "straight")
    stop_step = straight["steps"]
    # cut mid-epoch before the stop (4 steps an epoch), then resume to the end
    train(compose_config([*EARLY, f"trainer.max_steps={stop_step - 2}"]), tmp_path / "resumed")
    resumed = train(compose_config(EARLY), tmp_path / "resumed")
    assert resumed["steps"] == stop_step and resumed["stop_reason"] == "early_stopping"
    assert resumed["best_epoch"] == straight["best_epoch"]
    assert resumed["history"] == straight["history"]
    assert resumed["test"]["nll"] == straight["test"]["nll"]
    for name in ("last.pt", "best.pt"):
        left = load_checkpoint(tmp_path / "straight" / "checkpoints" / name)
        right = load_checkpoint(tmp_path / "resumed" / "checkpoints" / name)
        for key in left["model"]:
            assert torch.equal(left["model"][key], right["model"][key]), (name, key)


def test_a_patience_without_validation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trainer\.early_stopping needs the validation bound"):
        train(compose_config([*EARLY, "trainer.valid_samples=0"]), tmp_path)
    with pytest.raises(ConfigError, match=r"trainer\.early_stopping\.patience"):
        train(compose_config([*EARLY, "trainer.early_stopping.patience=0"]), tmp_path / "zero")


def test_a_run_that_ends_by_its_budget_says_so(tmp_path: Path) -> None:
    metrics = train(compose_config(TINY), tmp_path / "epochs")
    assert metrics["stop_reason"] == "epochs" and metrics["test"]["checkpoint"] == "final"
    steps = train(compose_config([*TINY, "trainer.max_steps=5"]), tmp_path / "steps")
    assert steps["stop_reason"] == "max_steps"
    saved = json.loads((tmp_path / "steps" / "metrics.json").read_text())
    assert saved["stop_reason"] == "max_steps"
