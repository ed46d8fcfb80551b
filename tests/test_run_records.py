"""A run's record and messages stay true (issue 57, rows 8-10, 12, 14, 15): advice that works
when followed, a record never ahead of its checkpoint, a record of the wrong shape named before
any work, misplaced or read-only entries named in one line, the status said on the console,
and the exit status of a stop signal."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers import compose_config
from tests.test_trust import QUICK, snapshot
from vgp_bench.analysis.report.runs import Excluded, load_run
from vgp_bench.errors import NonFiniteTrainingError, NoSpaceError, RunFolderError
from vgp_bench.run.commands import eval_command
from vgp_bench.run.commands.eval_command import evaluate_checkpoint
from vgp_bench.run.commands.train import outcome, train
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.folder.metrics import RunRecord
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.trainer import Trainer
from vgp_bench.run.process.signals import EvaluationInterrupted, exit_status


def test_the_advice_after_a_divergence_works_when_followed(tmp_path: Path) -> None:
    # row 8: every gradient from the third step on is NaN; last.pt exists by then
    run_dir = tmp_path / "run"
    settings = [*QUICK, "trainer.max_steps=8", "trainer.checkpoint_every=1"]
    cfg = compose_config([*settings, "trainer.max_nonfinite=3", "trainer.check_gradients=true"])
    parts = build_components(cfg)
    calls = {"count": 0}

    def poison_from_the_third(gradient: torch.Tensor) -> torch.Tensor:
        calls["count"] += 1
        return gradient * float("nan") if calls["count"] >= 3 else gradient

    next(parts.model.parameters()).register_hook(poison_from_the_third)
    with pytest.raises(NonFiniteTrainingError) as error:
        Trainer(cfg, run_dir, parts).fit()
    advice = str(error.value)
    assert "the last good checkpoint is" in advice
    (asked,) = re.findall(r"pass (trainer\.resume=false trainer\.move_aside=true)", advice)
    metrics = train(compose_config([*settings, "optim.optimizer.lr=1e-4", *asked.split()]), run_dir)
    assert metrics["status"] == "finished" and metrics["steps"] == 8
    (old,) = [path for path in tmp_path.iterdir() if path.name.startswith("run.replaced-")]
    assert json.loads((old / "metrics.json").read_text())["status"] == "failed"


def test_a_full_disk_during_a_resume_leaves_the_record_at_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # row 9: the record said step 10 with checkpoints at step 5
    from vgp_bench.run.folder import checkpoint as checkpoint_module

    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)  # last.pt at step 2
    last = run_dir / "checkpoints" / "last.pt"
    saved = last.read_bytes()
    real_write = checkpoint_module.atomic_write

    def full_disk(path, write) -> None:
        def nothing_fits(stream) -> None:
            raise OSError(28, "No space left on device")

        real_write(path, nothing_fits if str(path).endswith(".pt") else write)

    monkeypatch.setattr(checkpoint_module, "atomic_write", full_disk)
    with pytest.raises(NoSpaceError) as error:
        train(compose_config([*QUICK, "trainer.max_steps=4"]), run_dir)
    assert str(error.value).startswith(  # best.pt, at the end of epoch 1 (step 4)
        f"no space left on {run_dir / 'checkpoints'} (writing best.pt, which is not written)"
    )
    assert "files already there" not in str(error.value)  # config.yaml and the log did change
    record = json.loads((run_dir / "metrics.json").read_text())
    assert record["status"] == "failed" and last.read_bytes() == saved
    assert record["steps"] == load_checkpoint(last)["state"]["step"] == 2


def test_a_record_of_the_wrong_shape_is_named_before_any_work(tmp_path: Path) -> None:
    # row 10: valid JSON, not a run's record
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    (run_dir / "metrics.json").write_text(json.dumps({"status": 5, "history": "x"}))
    before = snapshot(run_dir)
    for start in (
        lambda: train(compose_config(QUICK), run_dir),
        lambda: evaluate_checkpoint(str(run_dir), OmegaConf.create({"is_samples": 2})),
    ):
        with pytest.raises(RunFolderError) as error:
            start()
        message = str(error.value)
        assert message.startswith(f"{run_dir / 'metrics.json'} is unreadable (")
        assert "'status' must be a string, got integer 5" in message and "\n" not in message
    assert snapshot(run_dir) == before
    excluded = load_run(run_dir)  # the report neither
    assert isinstance(excluded, Excluded) and excluded.status == "unreadable"


@pytest.mark.parametrize(
    ("entry", "make", "expected"),
    [
        ("tensorboard", "file", "is a file where the run keeps a folder"),
        (".lock", "folder", "is a folder where the run keeps a file"),
        ("metrics.json", "folder", "is a folder where the run keeps a file"),
        ("", "read-only", "is read-only: make the run folder writable"),
    ],
)
def test_a_misplaced_or_read_only_entry_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, make: str, expected: str
) -> None:
    # row 12: once FileExistsError, IsADirectoryError, OSError [Errno 30]
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    path = run_dir / entry
    if make == "read-only":  # root writes anywhere: the check itself is what counts
        monkeypatch.setattr("vgp_bench.run.folder.folder_checks.os.access", lambda *_: False)
    else:
        if path.is_dir():
            for inner in path.iterdir():
                inner.unlink()
            path.rmdir()
        else:
            path.unlink(missing_ok=True)
        path.mkdir() if make == "folder" else path.write_text("")
    before = snapshot(run_dir)
    with pytest.raises(RunFolderError) as error:
        train(compose_config([*QUICK, "trainer.max_steps=4"]), run_dir)
    message = str(error.value)
    assert message.startswith(f"{path} {expected}") and "\n" not in message
    assert snapshot(run_dir) == before
    if make == "folder":  # vgp-eval too
        with pytest.raises(RunFolderError, match=re.escape(f"{path} {expected}")):
            evaluate_checkpoint(str(run_dir), OmegaConf.create({"is_samples": 2}))


def test_the_console_says_what_a_runs_status_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # row 14: a smoke run marked diverged said so only in train.log
    metrics = train(compose_config(QUICK), tmp_path / "run")
    assert outcome(RunRecord(metrics)) == (
        "finished after 2 steps (max_steps); recorded in metrics.json"
    )
    monkeypatch.setattr(  # as an untrained model's test result is judged
        "vgp_bench.run.folder.run_folder.divergence",
        lambda test, shape: {"diverged": True, "diverged_reason": "test -log p(x) 60 > 46"},
    )
    metrics = train(
        compose_config([*QUICK, "eval.at_end=true", "eval.is_samples=2"]), tmp_path / "d"
    )
    line = outcome(RunRecord(metrics))
    assert line.startswith("finished after 2 steps (max_steps), marked diverged in metrics.json")
    assert "test -log p(x) 60 > 46" in line and "vgp-report lists it apart" in line


def test_a_stop_signal_ends_a_command_with_128_plus_its_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # row 15: SIGTERM ended with 130 (vgp-train's is run: tests/test_train.py's SIGTERM test)
    assert exit_status("SIGTERM") == 143 and exit_status("SIGINT") == 130

    def stopped(*_args, **_kwargs) -> None:
        raise EvaluationInterrupted("SIGTERM")

    monkeypatch.setattr(eval_command, "evaluate_checkpoint", stopped)
    monkeypatch.setattr(eval_command, "resolve_checkpoint", lambda given: given)
    monkeypatch.setattr(sys, "argv", ["vgp-eval", f"checkpoint={tmp_path / 'x.pt'}"])
    with pytest.raises(SystemExit) as stop:
        eval_command._hydra_main()
    assert stop.value.code == 143
    assert "vgp-eval: SIGTERM: stopped" in capsys.readouterr().err
