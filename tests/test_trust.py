"""Trust: nothing a user hands the runner can execute code or silently mix up a run folder."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from tests.helpers import REPO, TINY, compose_config
from vgp_bench.analysis import report
from vgp_bench.blackbox.cli import run as fit_run
from vgp_bench.data import mnist
from vgp_bench.data.mnist_convert import write_mnist_h5
from vgp_bench.divergence import divergence
from vgp_bench.errors import ConfigError, NonFiniteTrainingError
from vgp_bench.files import atomic_file
from vgp_bench.gp.cholesky import cholesky_with_jitter
from vgp_bench.run.commands.eval_command import evaluate_checkpoint
from vgp_bench.run.commands.train import train
from vgp_bench.run.config.command_line import command_line_problem
from vgp_bench.run.folder import run_folder as run_folder_module
from vgp_bench.run.folder.checkpoint import load_checkpoint, save_checkpoint, write_json
from vgp_bench.run.folder.eval_journal import EvaluationJournal
from vgp_bench.run.folder.metrics import Evaluation
from vgp_bench.run.folder.run_folder import RunFolderError, acquire_lock, refuse_if_locked
from vgp_bench.run.loop import epoch_evaluation as epoch_evaluation_module
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.trainer import Trainer
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.signals import EvaluationInterrupted


class _RunsAShellCommand:
    """A pickle payload: unpickling it would run `touch <marker>`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def write_malicious_checkpoint(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        pickle.dump({"model": _RunsAShellCommand(marker)}, stream)
    # torch's own zip format with the same payload
    torch.save({"model": _RunsAShellCommand(marker)}, path.with_suffix(".zip.pt"))


@pytest.mark.parametrize("suffix", [".pt", ".zip.pt"])
def test_a_crafted_checkpoint_is_refused_without_running_code(tmp_path: Path, suffix: str) -> None:
    marker = tmp_path / "marker"
    write_malicious_checkpoint(tmp_path / "evil.pt", marker)
    with pytest.raises(ValueError, match="nothing in it was executed") as error:
        load_checkpoint(tmp_path / ("evil" + suffix))
    assert "evil" in str(error.value) and "\n" not in str(error.value)
    assert not marker.exists()


def test_a_crafted_last_checkpoint_is_refused_by_vgp_train(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)  # a run's folder (a folder without one is refused)
    write_malicious_checkpoint(run_dir / "checkpoints" / "last.pt", marker)
    with pytest.raises(ValueError, match=r"last\.pt"):
        train(compose_config(TINY), run_dir)
    assert not marker.exists()


def test_a_real_checkpoint_loads_with_weights_only(tmp_path: Path) -> None:
    train(compose_config(TINY), tmp_path)
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert {"model", "heads", "optimizer", "generators", "state", "config"} <= checkpoint.keys()


# ---------------------------------------------------------------- helpers


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under `folder` with its bytes, mtime and mode."""
    return {
        str(path.relative_to(folder)): (
            path.read_bytes(),
            path.stat().st_mtime_ns,
            path.stat().st_mode,
        )
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def cli(name: str, arguments: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """An installed console script (as users run it), else its module."""
    modules = {
        "vgp-train": "vgp_bench.run.commands.train",
        "vgp-eval": "vgp_bench.run.commands.eval_command",
    }
    script = Path(sys.executable).parent / name
    command = [str(script)] if script.exists() else [sys.executable, "-m", modules[name]]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*command, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


QUICK = [*TINY, "trainer.max_steps=2", "eval.at_end=false", "trainer.image_every=0"]


def metrics_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


# ---------------------------------------------------------------- one process per folder


def test_a_busy_folder_or_a_refused_resume_changes_no_byte(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    assert not (run_dir / ".lock").exists()  # released at the end
    before = snapshot(run_dir)
    holder = acquire_lock(run_dir, "vgp-train (the first run)")
    try:
        busy = cli("vgp-train", [*QUICK, f"hydra.run.dir={run_dir}"], tmp_path)
    finally:
        holder.release()
    assert busy.returncode == 1
    assert len(error_lines(busy)) == 1, busy.stderr
    assert "in use by vgp-train (the first run)" in busy.stderr
    assert f"pid {os.getpid()}" in busy.stderr
    # Hydra's .hydra/ files (and train.log) are written only by a run that may start
    other_seed = cli("vgp-train", [*QUICK, "seed=5", f"hydra.run.dir={run_dir}"], tmp_path)
    assert other_seed.returncode == 1 and len(error_lines(other_seed)) == 1, other_seed.stderr
    assert "different 'seed' config" in other_seed.stderr
    assert snapshot(run_dir) == before


def test_the_lock_names_its_holder_and_is_released_by_a_dead_one(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lock = acquire_lock(run_dir, "vgp-train")
    text = (run_dir / ".lock").read_text()
    assert f"pid {os.getpid()}" in text and socket.gethostname() in text
    with pytest.raises(RunFolderError, match="in use by vgp-train"):
        train(compose_config(QUICK), run_dir)
    with pytest.raises(RunFolderError, match="in use by vgp-train"):
        refuse_if_locked(run_dir)
    lock.release()
    # a holder killed with -9 leaves its lock file but not its lock
    (run_dir / ".lock").write_text("vgp-train (pid 1 on elsewhere, since long ago)\n")
    assert train(compose_config(QUICK), run_dir)["status"] == "finished"
    assert not (run_dir / ".lock").exists()


def test_vgp_eval_refuses_a_folder_in_use(tmp_path: Path) -> None:
    train(compose_config(QUICK), tmp_path)
    before = snapshot(tmp_path)
    lock = acquire_lock(tmp_path, "vgp-train")
    try:
        with pytest.raises(RunFolderError, match="in use by vgp-train"):
            evaluate_checkpoint(str(tmp_path / "checkpoints" / "last.pt"), OmegaConf.create({}))
    finally:
        lock.release()
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- resume and fresh starts


def test_resume_false_never_destroys_a_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(TINY), run_dir)  # a finished run with best.pt and last.pt
    before = snapshot(run_dir)
    fresh = [*TINY, "trainer.resume=false", "model.latent_dims=[2]"]
    with pytest.raises(
        RunFolderError, match=r"hydra\.run\.dir=.*trainer\.move_aside=true"
    ) as error:
        train(compose_config(fresh), run_dir)
    assert "finished after 8 steps" in str(error.value) and "\n" not in str(error.value)
    assert snapshot(run_dir) == before
    metrics = train(
        compose_config([*fresh, "trainer.move_aside=true", "trainer.max_steps=2"]), run_dir
    )
    assert metrics["status"] == "finished" and metrics["steps"] == 2
    moved = [path for path in tmp_path.iterdir() if path.name.startswith("run.replaced-")]
    assert len(moved) == 1 and snapshot(moved[0]) == before  # the old run, intact
    assert not (run_dir / "checkpoints" / "best.pt").exists()  # no stale best.pt of the old run


def test_resume_refuses_changes_that_alter_the_run_and_records_the_others(tmp_path: Path) -> None:
    train(compose_config([*TINY, "trainer.epochs=1"]), tmp_path)
    before = snapshot(tmp_path)
    for change in ("trainer.batch_size=400", "trainer.n_samples=2", "optim.optimizer.lr=0.1"):
        with pytest.raises(RunFolderError, match="change what the run computes") as error:
            train(compose_config([*TINY, "trainer.epochs=1", change]), tmp_path)
        assert change.split("=")[0] in str(error.value)
        assert snapshot(tmp_path) == before
    extended = [*TINY, "trainer.epochs=2", "eval.is_samples=4", "trainer.log_every=1"]
    metrics = train(compose_config(extended), tmp_path)
    assert metrics["status"] == "finished" and metrics["epochs_completed"] == 2
    (record,) = metrics["resume_changes"]
    assert record["step"] == 4
    assert record["changes"] == {
        "eval.is_samples": [8, 4],
        "trainer.epochs": [1, 2],
        "trainer.log_every": [2, 1],
    }
    assert metrics_of(tmp_path)["resume_changes"] == metrics["resume_changes"]


def write_small_mnist(data_dir: Path, shift: int = 0) -> None:
    """data_dir/mnist.h5 with 16 images a split (grey levels raised by `shift`, clipped)."""
    generator = np.random.default_rng(0)
    splits = {}
    for split in mnist.SPLITS:
        grey = generator.integers(0, 256, (16, 28, 28))
        grey = np.clip(grey + shift, 0, 255).astype(np.uint8)
        binary = (grey > 127).astype(np.uint8)
        splits[split] = mnist.SplitArrays(grey, binary, generator.integers(0, 10, 16))
    attrs = {"format_version": mnist.FORMAT_VERSION, "sha256": "ab" * 32, "binarization_seed": 0}
    write_mnist_h5(data_dir / "mnist.h5", splits, {**attrs, "binary_origin": "bernoulli"})


def test_a_resume_on_other_data_is_refused_and_changes_no_byte(tmp_path: Path) -> None:
    """A data file rebuilt since the run started (other grey levels, another format) would
    mix two datasets in one run: refused, nothing written; on its own data it resumes."""
    data_dir, run_dir = tmp_path / "data", tmp_path / "run"
    data_dir.mkdir()
    write_small_mnist(data_dir)
    small = [item for item in TINY if not item.startswith("dataset")]
    settings = [*small, "dataset=mnist", f"data_dir={data_dir}", "eval.at_end=false"]
    train(compose_config([*settings, "trainer.epochs=1"]), run_dir)
    recorded = metrics_of(run_dir)["dataset"]
    assert recorded["format_version"] == 2 and len(recorded["content_sha256"]) == 64
    started_on = (run_dir / "metrics.json").read_text()

    def refused(key: str) -> None:
        before = snapshot(run_dir)
        with pytest.raises(RunFolderError, match="trained on other data") as error:
            train(compose_config([*settings, "trainer.epochs=2"]), run_dir)
        message = str(error.value)
        assert key in message and "data_dir=" in message and "\n" not in message
        assert snapshot(run_dir) == before

    write_small_mnist(data_dir, shift=1)  # the file rebuilt with other grey levels
    refused("content_sha256")
    write_small_mnist(data_dir)  # the file it started with, rebuilt alike
    record = json.loads(started_on)
    record["dataset"]["format_version"] = 1  # as a run started on a format-1 file records it
    (run_dir / "metrics.json").write_text(json.dumps(record))
    refused("format_version")
    (run_dir / "metrics.json").write_text(started_on)
    assert train(compose_config([*settings, "trainer.epochs=2"]), run_dir)["status"] == "finished"
    # a record written before the data's identity was recorded is not compared on that key
    record = metrics_of(run_dir)
    del record["dataset"]["content_sha256"]
    (run_dir / "metrics.json").write_text(json.dumps(record))
    write_small_mnist(data_dir, shift=1)
    assert train(compose_config([*settings, "trainer.epochs=3"]), run_dir)["status"] == "finished"
    # vgp-eval may evaluate other data than the run's: each evaluation records which it was
    write_small_mnist(data_dir)
    settings = OmegaConf.create({"is_samples": 2, "subset": None, "save_per_example": True})
    evaluate_checkpoint(str(run_dir), settings, device_name="cpu", data_dir=str(data_dir))
    first = metrics_of(run_dir)["evaluations"][-1]["dataset"]
    write_small_mnist(data_dir, shift=1)
    evaluate_checkpoint(str(run_dir), settings, device_name="cpu", data_dir=str(data_dir))
    second = metrics_of(run_dir)["evaluations"][-1]["dataset"]
    assert first["format_version"] == second["format_version"] == mnist.FORMAT_VERSION
    assert first["content_sha256"] != second["content_sha256"]
    step = metrics_of(run_dir)["evaluations"][-1]["step"]
    files = sorted(path.name for path in run_dir.glob(f"test_per_example_k2_step{step}_data-*.h5"))
    assert files == sorted(
        f"test_per_example_k2_step{step}_data-{d['content_sha256'][:8]}.h5" for d in (first, second)
    )
    assert "evaluated on other data than the run trained on" in (run_dir / "eval.log").read_text()


def test_resume_after_extending_epochs_matches_a_straight_run(tmp_path: Path) -> None:
    common = [*TINY, "eval.at_end=false", "trainer.image_every=0"]
    train(compose_config([*common, "trainer.epochs=1"]), tmp_path / "extended")
    train(compose_config([*common, "trainer.epochs=2"]), tmp_path / "extended")
    train(compose_config([*common, "trainer.epochs=2"]), tmp_path / "straight")
    first = load_checkpoint(tmp_path / "extended" / "checkpoints" / "last.pt")
    second = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    for name, value in second["model"].items():
        assert torch.equal(first["model"][name], value), name


# ---------------------------------------------------------------- settings checked at start


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.batch_size=-5", "trainer.batch_size"),
        ("trainer.batch_size=0", "trainer.batch_size"),
        ("trainer.epochs=-1", "trainer.epochs"),
        ("trainer.log_every=0", "trainer.log_every"),
        ("trainer.max_steps=0", "trainer.max_steps"),
        ("eval.is_samples=0", "eval.is_samples"),
        ("eval.subset=-3", "eval.subset"),
        ("eval.split=nowhere", "eval.split"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(
    tmp_path: Path, override: str, key: str
) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as error:
        train(compose_config([*TINY, override]), run_dir)
    message = str(error.value)
    assert message.startswith(key) and "\n" not in message
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("command", "override", "key"),
    [
        ("vgp-train", "trainer.epochs=abc", "trainer.epochs"),
        ("vgp-train", "trainer.drop_last=maybe", "trainer.drop_last"),
        ("vgp-fit", "steps=abc", "steps"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_by_composition(
    command: str, override: str, key: str
) -> None:
    """Hydra's schemas (run/config/store.py) refuse a value of the wrong type as they compose,
    naming the key; on the command line the one-line check before composition answers first
    (test_command_line_errors_are_one_line_naming_the_key)."""
    name, common = ("fit", []) if command == "vgp-fit" else ("config", TINY)
    with pytest.raises(ConfigCompositionException) as error:
        compose_config([*common, override], config_name=name)
    assert str(error.value) == f"Error merging override {override}"
    assert key in str(error.value.__cause__)  # OmegaConf's: the value, the type, full_key: <key>
    assert command_line_problem(command, [override]).startswith(f"{key} must be ")


@pytest.mark.parametrize(
    ("override", "key"),
    [("steps=-5", "steps"), ("samples.importance=0", "samples")],
)
def test_vgp_fit_settings_are_checked(tmp_path: Path, override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}"):
        fit_run(compose_config([override], config_name="fit"), tmp_path)
    assert not any(tmp_path.iterdir())


def test_command_line_errors_are_one_line_naming_the_key(tmp_path: Path) -> None:
    train_result = cli("vgp-train", [*QUICK, "trainer.epochs=abc"], tmp_path)
    assert train_result.returncode == 1
    assert error_lines(train_result) == [
        "vgp-train: error: trainer.epochs must be an integer >= 1, got 'abc'"
    ]
    eval_result = cli("vgp-eval", ["device=cpu"], tmp_path)
    assert eval_result.returncode == 1
    (line,) = error_lines(eval_result)
    assert line.startswith("vgp-eval: error: checkpoint is required")
    assert not any(path.suffix == ".log" for path in tmp_path.iterdir())


# ---------------------------------------------------------------- crashes and divergence


def test_a_cholesky_failure_goes_through_the_nonfinite_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose_config(
        [*TINY, "inference=vgp", "inference.variational_data_size=8", "trainer.max_nonfinite=2"]
    )
    parts = build_components(cfg)
    calls = {"count": 0}
    head = parts.heads["z"]
    original = head.factorize

    def failing_after_two(inputs):
        calls["count"] += 1
        if calls["count"] > 2:  # the real error of a matrix no jitter can save
            return cholesky_with_jitter(-torch.eye(4), sync_free=False)
        return original(inputs)

    monkeypatch.setattr(head, "factorize", failing_after_two)
    trainer = Trainer(cfg, tmp_path, parts)
    with pytest.raises(NonFiniteTrainingError, match="not positive definite"):
        trainer.fit()
    metrics = metrics_of(tmp_path)
    assert metrics["status"] == "failed" and "2 steps in a row" in metrics["error"]
    assert trainer.state.nonfinite_total == 2 and trainer.state.step == 2
    log = (tmp_path / "train.log").read_text()
    assert "skipped" in log and "NonFiniteTrainingError" in log


def test_any_crash_is_recorded_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_evaluation(*args, **kwargs):
        raise RuntimeError("out of device memory")

    monkeypatch.setattr(
        "vgp_bench.run.loop.epoch_evaluation.evaluate_components", broken_evaluation
    )
    with pytest.raises(RuntimeError, match="out of device memory") as error:
        train(compose_config(TINY), tmp_path)
    metrics = metrics_of(tmp_path)
    assert metrics["status"] == "failed"
    assert metrics["error"] == "RuntimeError: out of device memory"
    log = (tmp_path / "train.log").read_text()
    assert "Traceback" in log and "out of device memory" in log
    assert any("train.log" in note for note in error.value.__notes__)
    # vgp-report points at a log that holds the error
    excluded = report.load_run(tmp_path)
    assert isinstance(excluded, report.Excluded) and excluded.status == "failed"
    assert "out of device memory" in excluded.reason


def test_report_hint_names_a_log_that_exists(tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    (crashed / ".hydra").mkdir(parents=True)
    (crashed / ".hydra" / "config.yaml").write_text("seed: 0\n")
    silent = report.load_run(crashed)
    assert isinstance(silent, report.Excluded) and "left no log" in silent.reason
    (crashed / "train.log").write_text("Traceback ...\nMemoryError\n")
    logged = report.load_run(crashed)
    assert isinstance(logged, report.Excluded) and "see train.log" in logged.reason


def test_divergence_is_flagged_and_kept_out_of_the_tables(tmp_path: Path, capsys) -> None:
    metrics = train(
        compose_config([*TINY, "trainer.max_steps=2", "trainer.image_every=0"]), tmp_path / "ok"
    )
    assert metrics["diverged"] is False and metrics["trivial_nll"] == pytest.approx(
        64 * math.log(2)
    )
    assert divergence({"nll": 1e14, "bound_nll": 2e14, "nll_stderr": 1.0}, (1, 28, 28))["diverged"]
    assert divergence({"nll": math.nan, "bound_nll": 90.0}, (1, 28, 28))["diverged"]
    assert not divergence({"nll": 90.0, "bound_nll": 95.0}, (1, 28, 28))["diverged"]
    for seed, (name, nll) in enumerate((("blown", 1e14), ("fine", 90.0))):
        folder = tmp_path / "runs" / name
        folder.mkdir(parents=True)
        test = {"nll": nll, "bound_nll": nll + 5, "nll_stderr": 0.3, "bound_nll_stderr": 0.3}
        test |= {"is_samples": 5000, "n_examples": 10000, "is_below_bound": False}
        (folder / "metrics.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "model": "dlgm1",
                    "inference": "vgp",
                    "seed": seed,  # two seeds (one seed twice would count once)
                    "dataset": {"name": "mnist", "split_sizes": {"test": 10000}},
                    "steps": 10,
                    "test": test,
                }
            )
        )
    assert report.main([str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "1 in the tables, 0 not, 1 diverged" in out
    section = out.split("## Diverged runs")[1]
    assert "blown" in section and "worse than 543.43" in section
    assert report.main([str(tmp_path / "runs"), "--include-diverged"]) == 0
    assert "2 in the tables" in capsys.readouterr().out


# ---------------------------------------------------------------- signals during evaluation


def signal_during(monkeypatch: pytest.MonkeyPatch, split: str) -> dict[str, int]:
    """Send SIGTERM to this process from inside the first evaluation of `split`."""
    real = epoch_evaluation_module.evaluate_components
    sent = {"count": 0}

    def evaluate(*args, **kwargs):
        request = kwargs.get("request") or args[-1]
        if (request.split or "test") == split and not sent["count"]:
            sent["count"] += 1
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises before the next line
        return real(*args, **kwargs)

    monkeypatch.setattr(epoch_evaluation_module, "evaluate_components", evaluate)
    return sent


def test_a_signal_during_the_final_evaluation_stops_it_and_a_rerun_redoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = signal_during(monkeypatch, "test")
    metrics = train(compose_config(TINY), tmp_path)
    assert sent["count"] == 1
    assert metrics["status"] == "interrupted" and "test" not in metrics
    assert metrics_of(tmp_path)["status"] == "interrupted"
    metrics = train(compose_config(TINY), tmp_path)
    assert metrics["status"] == "finished" and metrics["test"]["step"] == 8


def signal_after_journal_batch(monkeypatch: pytest.MonkeyPatch, batches: int) -> None:
    """SIGTERM once an evaluation's journal has recorded `batches` batches."""
    real_record = EvaluationJournal.record

    def record_then_stop(
        self: EvaluationJournal,
        batches_done: int,
        estimates: dict[str, list[torch.Tensor]],
        generator: torch.Generator,
    ) -> None:
        real_record(self, batches_done, estimates, generator)
        if batches_done == batches:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(EvaluationJournal, "record", record_then_stop)


def test_a_stopped_final_evaluation_resumes_after_its_finished_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = [*TINY, "eval.batch_size=4", "trainer.image_every=0"]
    straight = train(compose_config(common), tmp_path / "straight")
    signal_after_journal_batch(monkeypatch, 3)  # of the four test batches
    stopped = train(compose_config(common), tmp_path / "stopped")
    assert stopped["status"] == "interrupted" and "test" not in stopped
    assert len(list((tmp_path / "stopped").glob("test_partial_k*.pt"))) == 1
    monkeypatch.undo()
    resumed = train(compose_config(common), tmp_path / "stopped")
    assert resumed["status"] == "finished"
    assert "3 batches (12 examples) done" in (tmp_path / "stopped" / "train.log").read_text()
    for key in ("nll", "bound_nll", "pareto_k_above_0_7", "n_examples", "step"):
        assert resumed["test"][key] == straight["test"][key], key
    assert not list((tmp_path / "stopped").glob("test_partial_k*.pt"))


def test_a_signal_during_validation_stops_it_and_the_resume_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = [*TINY, "eval.at_end=false", "trainer.image_every=0"]
    sent = signal_during(monkeypatch, "valid")
    metrics = train(compose_config(common), tmp_path / "stopped")
    assert sent["count"] == 1 and metrics["status"] == "interrupted"
    checkpoint = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert checkpoint["state"]["epoch_end_pending"] and checkpoint["state"]["step"] == 4
    monkeypatch.undo()
    resumed = train(compose_config(common), tmp_path / "stopped")
    straight = train(compose_config(common), tmp_path / "straight")
    assert resumed["history"] == straight["history"]  # the epoch's validation redone, once
    for name, value in load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")[
        "model"
    ].items():
        assert torch.equal(
            load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")["model"][name], value
        )


# ---------------------------------------------------------------- files


def test_orphaned_temporary_files_are_removed_at_the_next_start(tmp_path: Path) -> None:
    train(compose_config(QUICK), tmp_path)
    orphans = [
        tmp_path / "checkpoints" / ".last.pt.vgp-k3j2h1.tmp",
        tmp_path / ".metrics.json.vgp-abc123.tmp",
    ]
    for orphan in orphans:
        orphan.write_bytes(b"half a checkpoint")
    with pytest.raises(RunFolderError):  # a refused start removes nothing
        train(compose_config([*QUICK, "seed=9"]), tmp_path)
    assert all(orphan.exists() for orphan in orphans)
    train(compose_config(QUICK), tmp_path)
    assert not any(orphan.exists() for orphan in orphans)
    assert "removed .last.pt.vgp-k3j2h1.tmp" in (tmp_path / "train.log").read_text()


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        save_checkpoint({"value": torch.ones(1)}, tmp_path / "last.pt")
        write_json({"status": "finished"}, tmp_path / "metrics.json")
        with atomic_file(tmp_path / "per_example.h5") as temporary:
            temporary.write_bytes(b"data")
    finally:
        os.umask(previous)
    for name in ("last.pt", "metrics.json", "per_example.h5"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


# ---------------------------------------------------------------- vgp-eval adds, never replaces


def test_vgp_eval_adds_evaluations_and_the_report_uses_the_most_precise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(TINY), run_dir)
    recorded = metrics_of(run_dir)["test"]
    monkeypatch.chdir(tmp_path)
    last = str(run_dir / "checkpoints" / "last.pt")
    quick = evaluate_checkpoint(last, OmegaConf.create({"is_samples": 2, "subset": 5}), "cpu")
    precise = evaluate_checkpoint(last, OmegaConf.create({"is_samples": 16}), "cpu")
    metrics = metrics_of(run_dir)
    assert metrics["test"] == recorded  # the run's own result is never replaced
    assert [e["is_samples"] for e in metrics["evaluations"]] == [2, 16]
    assert quick.n_examples == 5 and precise.n_examples == 16
    assert all(e["step"] == 8 and e["run_steps"] == 8 for e in metrics["evaluations"])
    log = (run_dir / "eval.log").read_text()
    assert "evaluating" in log and "result" in log
    assert not list(tmp_path.glob("*.log"))  # nothing in the current folder
    chosen = report.load_run(run_dir)
    assert isinstance(chosen, report.Run)
    assert chosen.metrics["test"]["is_samples"] == 16 and chosen.evaluation == "vgp-eval last.pt"
    assert report.main([str(run_dir)]) == 0
    table = capsys.readouterr().out
    assert "| vgp-eval last.pt |" in table
    # the quick one never wins over a full-test-set evaluation with fewer samples
    assert (
        report.chosen_evaluation(
            {
                "steps": 8,
                "dataset": {"split_sizes": {"test": 16}},
                "test": recorded,
                "evaluations": [{**quick.to_json(), "is_samples": 1000}],
            }
        )
        == recorded
    )


def test_a_stopped_vgp_eval_resumes_after_its_finished_batches_with_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train(compose_config([*QUICK, "trainer.max_steps=4"]), tmp_path / "straight")
    shutil.copytree(tmp_path / "straight", tmp_path / "stopped")
    settings = OmegaConf.create({"is_samples": 8, "batch_size": 4, "chunk_size": 3})

    def evaluate(folder: str, **changes: object) -> Evaluation:
        checkpoint = str(tmp_path / folder / "checkpoints" / "last.pt")
        return evaluate_checkpoint(checkpoint, OmegaConf.merge(settings, changes), "cpu")

    def journals() -> list[Path]:
        return sorted((tmp_path / "stopped").glob("test_partial_k*.pt"))

    straight = evaluate("straight")

    def stop_after(batches: int, changes: dict[str, object]) -> None:
        signal_after_journal_batch(monkeypatch, batches)  # of four
        with pytest.raises(EvaluationInterrupted):
            evaluate("stopped", **changes)
        monkeypatch.undo()

    stop_after(2, {})
    stop_after(1, {"seed": 5})  # another evaluation keeps its own journal beside it
    assert len(journals()) == 2 and "evaluations" not in metrics_of(tmp_path / "stopped")
    assert "run the same command again to resume" in (tmp_path / "stopped" / "eval.log").read_text()
    resumed = evaluate("stopped")
    log = (tmp_path / "stopped" / "eval.log").read_text()
    assert "batches (8 examples) done" in log  # two batches of four
    for key in ("nll", "bound_nll", "bound_gap", "pareto_k_mean", "n_examples"):
        assert resumed.to_json()[key] == straight.to_json()[key], key
    assert len(journals()) == 1  # recorded in metrics.json, its journal is gone; seed 5 stays
    assert evaluate("stopped", seed=5).nll == evaluate("straight", seed=5).nll
    assert not journals()

    # a journal that does not check out (torn, or contents that do not fit) is ignored
    stop_after(2, {})
    (journal,) = journals()
    saved = torch.load(journal, weights_only=True)
    torch.save({**saved, "batches_done": 9}, journal)  # more batches than the split has
    assert evaluate("stopped").nll == straight.nll
    stop_after(2, {})
    journal.write_bytes(b"half a journal")
    assert evaluate("stopped").nll == straight.nll
    log = (tmp_path / "stopped" / "eval.log").read_text()
    assert "does not fit 16 examples" in log and "unreadable" in log
    assert not journals()


def test_a_failed_journal_write_does_not_stop_the_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train(compose_config(QUICK), tmp_path)
    checkpoint = str(tmp_path / "checkpoints" / "last.pt")
    settings = OmegaConf.create({"is_samples": 4, "batch_size": 8})
    expected = evaluate_checkpoint(checkpoint, settings, "cpu")

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("vgp_bench.run.folder.eval_journal.torch.save", full_disk)
    assert evaluate_checkpoint(checkpoint, settings, "cpu").nll == expected.nll
    assert "could not write the evaluation journal" in (tmp_path / "eval.log").read_text()


def test_a_run_older_than_a_config_key_resumes_when_the_key_keeps_the_old_behaviour(
    tmp_path: Path,
) -> None:
    from vgp_bench.run.folder.run_folder import RunFolderError, resume_changes

    saved = {"inference": {"name": "vgp", "outputs": "dense"}, "trainer": {"epochs": 5}}
    same = {"inference": {**saved["inference"], "prior_mean": "zero", "noise_ratio": 0.3}}
    changes = resume_changes(saved, {**saved, **same}, tmp_path)
    assert changes["inference.prior_mean"] == [None, "zero"]
    other = {"inference": {**saved["inference"], "prior_mean": "identity"}}
    with pytest.raises(RunFolderError, match="prior_mean"):
        resume_changes(saved, {**saved, **other}, tmp_path)


def test_a_run_saved_under_a_renamed_value_resumes_under_its_new_name(tmp_path: Path) -> None:
    """torch.optim.RMSprop became vgp_bench.optimizers.RMSprop (the same numbers): an older
    run resumes and the change is recorded; no other rename of the key is accepted."""
    from vgp_bench.run.folder.run_folder import RunFolderError, resume_changes

    saved = {"optim": {"optimizer": {"_target_": "torch.optim.RMSprop", "lr": 1e-3}}}
    renamed = {"optim": {"optimizer": {"_target_": "vgp_bench.optimizers.RMSprop", "lr": 1e-3}}}
    changes = resume_changes(saved, renamed, tmp_path)
    assert changes == {
        "optim.optimizer._target_": ["torch.optim.RMSprop", "vgp_bench.optimizers.RMSprop"]
    }
    with pytest.raises(RunFolderError, match="_target_"):
        resume_changes(renamed, saved, tmp_path)  # not backwards: older code lacks the class
    adam = {"optim": {"optimizer": {"_target_": "torch.optim.Adam", "lr": 1e-3}}}
    with pytest.raises(RunFolderError, match="_target_"):
        resume_changes(saved, adam, tmp_path)


# ---------------------------------------------------------------- links out of the run folder


def plant_link(run_dir: Path, name: str, target: Path) -> bytes:
    """Replace `<run>/<name>` by a symbolic link to `target` (a file elsewhere); its bytes."""
    target.write_bytes(b"someone else's file\n")
    (run_dir / name).unlink(missing_ok=True)
    (run_dir / name).symlink_to(target)
    return target.read_bytes()


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_unchanged(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    target = tmp_path / "elsewhere.txt"
    before = plant_link(run_dir, ".lock", target)
    with pytest.raises(RunFolderError, match=r"\.lock is a symbolic link") as error:
        train(compose_config(QUICK), run_dir)
    assert "\n" not in str(error.value)
    with pytest.raises(RunFolderError, match=r"\.lock is a symbolic link"):
        evaluate_checkpoint(str(run_dir / "checkpoints" / "last.pt"), OmegaConf.create({}))
    with pytest.raises(RunFolderError, match=r"\.lock is a symbolic link"):  # O_NOFOLLOW
        acquire_lock(run_dir, "vgp-train")
    assert target.read_bytes() == before


@pytest.mark.parametrize("name", ["samples.png", "reconstructions.png", "train.log"])
def test_run_files_planted_as_links_are_refused_and_their_targets_unchanged(
    tmp_path: Path, name: str
) -> None:
    from vgp_bench.figures.images import save_grid
    from vgp_bench.files import NoFollowFileHandler

    run_dir = tmp_path / "run"
    train(compose_config([*TINY, "trainer.max_steps=2", "eval.at_end=false"]), run_dir)
    target = tmp_path / "elsewhere.bin"
    before = plant_link(run_dir, name, target)
    with pytest.raises(RunFolderError, match=rf"{name} is a symbolic link"):
        train(compose_config([*TINY, "trainer.max_steps=4", "eval.at_end=false"]), run_dir)
    assert target.read_bytes() == before
    # the writers themselves never follow a link, whatever the checks before them
    if name.endswith(".png"):
        save_grid(torch.zeros(4, 1, 8, 8), run_dir / name, "a grid")
        assert not (run_dir / name).is_symlink()
        assert not (run_dir / name).with_suffix(".pdf").is_symlink()
    else:
        with pytest.raises(OSError):
            NoFollowFileHandler(str(run_dir / name)).close()
    assert target.read_bytes() == before


def test_a_folder_of_someone_elses_files_is_refused_and_only_our_temporaries_are_removed(
    tmp_path: Path,
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "samples.png").write_bytes(b"their picture")
    (theirs / ".hidden.tmp").write_bytes(b"their temporary file")
    (theirs / "train.log").write_text("my own notes\n")
    before = snapshot(theirs)
    with pytest.raises(RunFolderError, match=r"is not empty .* and holds no run") as error:
        train(compose_config(QUICK), theirs)
    assert "\n" not in str(error.value) and "hydra.run.dir" in str(error.value)
    assert snapshot(theirs) == before
    # in a run folder, a start removes the temporary files our writes name, and nothing else
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    (run_dir / ".hidden.tmp").write_bytes(b"not ours")
    (run_dir / ".metrics.json.vgp-abc123.tmp").write_bytes(b"ours, left by a kill")
    train(compose_config(QUICK), run_dir)
    assert (run_dir / ".hidden.tmp").read_bytes() == b"not ours"
    assert not (run_dir / ".metrics.json.vgp-abc123.tmp").exists()


# ---------------------------------------------------------------- messages that lead somewhere


def test_a_divergence_names_only_the_checkpoint_that_exists(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    diverging = [*QUICK, "trainer.max_steps=20", "optim.optimizer.lr=1e30"]
    with pytest.raises(NonFiniteTrainingError) as error:  # in its first epoch
        train(compose_config([*diverging, "trainer.max_nonfinite=2"]), run_dir)
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    assert "no checkpoint was written" in str(error.value)
    assert "last.pt" not in str(error.value)
    # the advice leads somewhere: the same folder restarts with a lower step size
    assert train(compose_config(QUICK), run_dir)["status"] == "finished"
    assert (
        "the last good checkpoint is"
        in run_folder_module.RunFolder(run_dir, DistributedContext(), {}).divergence_advice()
    )


def test_init_model_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"trainer\.init_model=.*not found"):
        train(compose_config([*QUICK, f"trainer.init_model={tmp_path / 'no.pt'}"]), run_dir)
    assert not run_dir.exists()
    with pytest.raises(ConfigError, match="is a folder"):
        train(compose_config([*QUICK, f"trainer.init_model={tmp_path}"]), run_dir)
    assert not run_dir.exists()
    assert train(compose_config(QUICK), run_dir)["status"] == "finished"  # the folder works


@pytest.mark.parametrize("how", ["crash before last.pt", "last.pt removed"])
def test_a_run_that_never_wrote_last_pt_restarts_keeping_the_attempts_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    run_dir = tmp_path / "run"
    if how == "crash before last.pt":

        def crash(self, name: str = "last.pt") -> None:
            raise RuntimeError("killed before the first last.pt")

        monkeypatch.setattr(Trainer, "save", crash)
        with pytest.raises(RuntimeError):
            train(compose_config(QUICK), run_dir)
        monkeypatch.undo()
    else:
        train(compose_config(TINY), run_dir)  # best.pt and last.pt
        (run_dir / "checkpoints" / "last.pt").unlink()  # as an error advised
    before = snapshot(run_dir)
    metrics = train(compose_config(QUICK), run_dir)
    assert metrics["status"] == "finished" and metrics["steps"] == 2
    (attempt,) = [path for path in tmp_path.iterdir() if path.name.startswith("run.attempt-")]
    assert metrics["previous_attempt"] == str(attempt)
    kept = snapshot(attempt)
    assert {name: kept[name] for name in before if name != "train.log"} == {
        name: value for name, value in before.items() if name != "train.log"
    }


def test_an_unreadable_metrics_json_is_named_before_any_work(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    (run_dir / "metrics.json").write_text('{"status": "fin\x01ished"}')
    before = snapshot(run_dir)
    for start in (
        lambda: train(compose_config(QUICK), run_dir),
        lambda: evaluate_checkpoint(str(run_dir / "checkpoints" / "last.pt"), OmegaConf.create({})),
    ):
        with pytest.raises(RunFolderError, match=r"metrics\.json is unreadable") as error:
            start()
        assert str(run_dir / "metrics.json") in str(error.value)
        assert snapshot(run_dir) == before


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vgp_bench.errors import NoSpaceError
    from vgp_bench.run.folder import checkpoint as checkpoint_module

    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    last = run_dir / "checkpoints" / "last.pt"
    before = last.read_bytes()
    real_write = checkpoint_module.atomic_write

    def full_disk(path, write) -> None:
        def half_then_full(stream) -> None:
            stream.write(b"half a checkpoint")
            raise OSError(28, "No space left on device")

        real_write(path, half_then_full if str(path).endswith(".pt") else write)

    monkeypatch.setattr(checkpoint_module, "atomic_write", full_disk)
    with pytest.raises(NoSpaceError) as error:
        train(compose_config([*QUICK, "trainer.max_steps=4"]), run_dir)
    assert str(error.value).startswith(f"no space left on {run_dir / 'checkpoints'}")
    assert last.read_bytes() == before
    assert not list((run_dir / "checkpoints").glob(".*.tmp"))


def test_vgp_eval_says_when_its_result_was_not_recorded(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(run_dir / "checkpoints" / "last.pt", elsewhere / "model.pt")
    before = snapshot(elsewhere)
    result = cli(
        "vgp-eval",
        [f"checkpoint={elsewhere / 'model.pt'}", "eval.is_samples=2", "device=cpu"],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "the result was not recorded" in result.stderr and "holds no run" in result.stderr
    assert snapshot(elsewhere) == before  # nothing written beside a foreign checkpoint
    assert "test:" not in result.stdout  # the table only, no YAML dump


def test_messages_are_true_for_the_command_that_prints_them(tmp_path: Path) -> None:
    from vgp_bench.run.commands.eval_command import resolve_checkpoint

    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)  # no validated epoch: no best.pt
    last = run_dir / "checkpoints" / "last.pt"
    assert resolve_checkpoint(run_dir) == last  # a run folder: its best, else its last
    assert resolve_checkpoint(run_dir / "checkpoints") == last
    with pytest.raises(FileNotFoundError, match=r"this run has .*last\.pt"):
        resolve_checkpoint(run_dir / "checkpoints" / "best.pt")
    with pytest.raises(FileNotFoundError, match="is a folder"):
        load_checkpoint(run_dir)
    lock = acquire_lock(run_dir, "vgp-train")
    try:
        with pytest.raises(RunFolderError, match="evaluate a copy of the run folder") as busy:
            evaluate_checkpoint(str(last), OmegaConf.create({}))
    finally:
        lock.release()
    assert "hydra.run.dir" not in str(busy.value)
    marker = tmp_path / "marker"
    write_malicious_checkpoint(tmp_path / "evil.pt", marker)
    with pytest.raises(ValueError, match="nothing in it was executed") as refused:
        load_checkpoint(tmp_path / "evil.zip.pt")
    assert "weights_only" not in str(refused.value) and "unsupported GLOBAL" in str(refused.value)


# ---------------------------------------------------------------- checked before the folder exists


def pre_start(command: str, overrides: list[str], run_dir: Path, capsys) -> str:
    """The one line `command`'s pre-start check prints for these overrides ('' if it passes)."""
    from vgp_bench.run.config.prestart import PreStart

    name = "fit" if command == "vgp-fit" else "config"
    config = compose_config(
        [*overrides, f"hydra.run.dir={run_dir}"], config_name=name, return_hydra_config=True
    )
    try:
        PreStart(command).on_run_start(config)
    except SystemExit as stop:
        assert stop.code == 1
        (line,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        return line
    return ""


def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_and_type(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    bad = [*QUICK, "inference=vgp", "inference.variational_data_size=abc"]
    with pytest.raises(ConfigError) as error:
        train(compose_config(bad), run_dir)
    assert str(error.value) == "inference.variational_data_size must be an integer, got 'abc'"
    with pytest.raises(ConfigError, match=r"model\.latent_dims must be a list"):
        train(compose_config([*QUICK, "model.latent_dims=3"]), run_dir)
    assert not run_dir.exists()


@pytest.mark.parametrize("case", ["a file", "a 300-character name", "a read-only parent"])
def test_a_run_folder_that_cannot_be_made_is_one_line_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, case: str
) -> None:
    (tmp_path / "afile").write_text("mine\n")
    run_dir = {
        "a file": tmp_path / "afile",
        "a 300-character name": tmp_path / ("x" * 300),
        "a read-only parent": tmp_path / "locked" / "run",
    }[case]
    if case == "a read-only parent":  # root writes anywhere: the check itself is what counts
        (tmp_path / "locked").mkdir()
        real_access = os.access
        monkeypatch.setattr(
            "vgp_bench.run.config.prestart.os.access",
            lambda path, mode: real_access(path, mode) and Path(path).name != "locked",
        )
    before = sorted(path.name for path in tmp_path.iterdir())
    line = pre_start("vgp-train", QUICK, run_dir, capsys)
    assert line.startswith("vgp-train: error: ") and line.endswith("pick another hydra.run.dir")
    assert {"a file": "is a file", "a 300-character name": "300 bytes"}.get(
        case, "read-only"
    ) in line
    assert sorted(path.name for path in tmp_path.iterdir()) == before
    if case == "a file":  # the whole command line: Hydra never gets to make the folder
        result = cli("vgp-train", [*QUICK, f"hydra.run.dir={run_dir}/run"], tmp_path)
        assert result.returncode == 1 and len(error_lines(result)) == 1, result.stderr
        assert "is a file, not a folder" in result.stderr


def test_bad_settings_for_a_new_folder_create_nothing(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "new" / "run"
    line = pre_start("vgp-train", [*QUICK, "trainer.epochs=0"], run_dir, capsys)  # ('abc' is
    # refused as Hydra composes: test_a_value_of_the_wrong_type_is_refused_by_composition)
    assert line == "vgp-train: error: trainer.epochs must be an integer >= 1, got 0"
    missing = [*QUICK, f"trainer.init_model={tmp_path / 'none.pt'}"]
    assert "trainer.init_model" in pre_start("vgp-train", missing, run_dir, capsys)
    result = cli("vgp-train", [*QUICK, "eval.is_samples=0", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 1 and len(error_lines(result)) == 1, result.stderr
    assert not (tmp_path / "new").exists()
    assert pre_start("vgp-train", QUICK, run_dir, capsys) == ""  # good settings pass


def test_an_added_key_no_config_defines_is_refused(tmp_path: Path, capsys) -> None:
    line = pre_start("vgp-train", [*QUICK, "+trainer.max_step=50"], tmp_path / "run", capsys)
    assert "+trainer.max_step: no such setting (did you mean trainer.max_steps?)" in line
    assert pre_start("vgp-train", [*QUICK, "++trainer.max_steps=5"], tmp_path / "run", capsys) == ""
    weight_decay = [*QUICK, "+optim.optimizer.weight_decay=0.01"]  # an argument of RMSprop
    assert pre_start("vgp-train", weight_decay, tmp_path / "run", capsys) == ""
    assert not (tmp_path / "run").exists()


def test_vgp_fit_refuses_an_unknown_family_in_one_line(tmp_path: Path, capsys) -> None:
    line = pre_start("vgp-fit", ["families=[nope]"], tmp_path / "fit", capsys)
    assert line.startswith("vgp-fit: error: families: unknown nope; choose from")
    assert not (tmp_path / "fit").exists()


def test_a_finished_run_started_again_with_other_eval_settings_is_refused(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    train(compose_config([*QUICK, "eval.at_end=true"]), run_dir)  # evaluates what it lacked
    assert metrics_of(run_dir)["test"]["is_samples"] == 8
    before = snapshot(run_dir)
    with pytest.raises(RunFolderError, match="finished run, tested with other") as error:
        train(compose_config([*QUICK, "eval.at_end=true", "eval.is_samples=10"]), run_dir)
    assert "vgp-eval checkpoint=" in str(error.value) and "eval.is_samples=10" in str(error.value)
    assert snapshot(run_dir) == before  # config.yaml still says what was computed
    # training further evaluates with the new settings, and config.yaml says so
    metrics = train(
        compose_config([*QUICK, "eval.at_end=true", "eval.is_samples=10", "trainer.max_steps=3"]),
        run_dir,
    )
    assert metrics["test"]["is_samples"] == 10
    assert OmegaConf.load(run_dir / "config.yaml").eval.is_samples == 10


# ---------------------------------------------------------------- the report counts each run once


def test_a_copied_or_rerun_run_is_counted_once_and_the_copies_named(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    train(compose_config([*QUICK, "eval.at_end=true"]), runs / "run")
    run_id = metrics_of(runs / "run")["run_id"]
    assert len(run_id) == 32
    train(compose_config([*QUICK, "eval.at_end=true"]), runs / "run")  # a resume keeps it
    assert metrics_of(runs / "run")["run_id"] == run_id
    shutil.copytree(runs / "run", runs / "run-copy")
    # moved aside, then the same setting and seed started again beside it
    train(
        compose_config(
            [*QUICK, "eval.at_end=true", "trainer.resume=false", "trainer.move_aside=true"]
        ),
        runs / "run",
    )
    assert metrics_of(runs / "run")["run_id"] != run_id
    assert report.main([str(runs)]) == 0
    out = capsys.readouterr().out
    assert "3 run folders" in out and "1 in the tables, 2 not" in out
    assert "n=1" in out and "(0, 0)" not in out
    copies = [line for line in out.splitlines() if "| copy |" in line]
    assert len(copies) == 2 and all("counted once" in line for line in copies)


def test_the_report_tells_a_live_run_from_a_dead_one(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    record = metrics_of(run_dir)
    write_json({**record, "status": "running"}, run_dir / "metrics.json")  # killed with -9
    dead = report.load_run(run_dir)
    assert isinstance(dead, report.Excluded) and dead.status == "stopped, resumable"
    lock = acquire_lock(run_dir, "vgp-train (the live one)")
    try:
        live = report.load_run(run_dir)
    finally:
        lock.release()
    assert isinstance(live, report.Excluded) and live.status == "running"
    assert "vgp-train (the live one)" in live.reason
    # a study's snapshot: the record and figures copied, the checkpoints left behind
    snapshot = tmp_path / "results" / "run"
    shutil.copytree(run_dir, snapshot, ignore=shutil.ignore_patterns("checkpoints"))
    copied = report.load_run(snapshot)
    assert isinstance(copied, report.Excluded) and copied.status == "unfinished"
    assert f"recorded at step {record['steps']} with no checkpoint here" in copied.reason
    write_json({**record, "status": "running", "steps": 0}, run_dir / "metrics.json")
    shutil.rmtree(run_dir / "checkpoints")  # killed before its first step
    early = report.load_run(run_dir)
    assert isinstance(early, report.Excluded) and early.status == "stopped"


# ---------------------------------------------------------------- long phases show progress


def test_an_evaluation_shows_progress_in_samples_with_a_rate_within_one_batch(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import functools

    from tqdm import tqdm

    from vgp_bench.run.loop.evaluate import estimate_split

    monkeypatch.setattr(  # every update drawn (the real bar redraws at most every 0.1 s)
        "vgp_bench.run.loop.evaluate.tqdm", functools.partial(tqdm, mininterval=0, miniters=1)
    )
    cfg = compose_config(QUICK)
    parts = build_components(cfg)
    generator = torch.Generator().manual_seed(0)
    split = parts.data.test.subset(4)
    estimate_split(parts.model, parts.heads, split, 12, 3, 4, generator, parts.device, True)
    bar = capsys.readouterr().err.replace("\r", "\n")
    # one batch of 4 examples x 12 samples, counted after each chunk of 3 samples
    assert "12.0/48.0" in bar and "48.0/48.0" in bar and "sample/s" in bar


def test_the_auxiliary_gap_budget_scales_with_the_run_and_says_what_it_skipped() -> None:
    from vgp_bench.run.loop.evaluate import aux_gap_examples

    eval_cfg = compose_config([]).eval  # 500 examples x 10 draws x 256 samples
    smoke = aux_gap_examples(eval_cfg, trained_examples=3 * 100)  # DRAW, max_steps=3
    assert smoke[0] == 0 and "skipped" in smoke[1] and "aux_gap_budget=full" in smoke[1]
    five_epochs = aux_gap_examples(eval_cfg, trained_examples=5 * 60000)
    assert five_epochs[0] == 117 and "on 117 of 500 examples" in five_epochs[1]
    assert aux_gap_examples(eval_cfg, trained_examples=100 * 60000) == (500, None)
    eval_cfg.aux_gap_budget = "full"
    assert aux_gap_examples(eval_cfg, trained_examples=300) == (500, None)


def test_repeated_ctrl_c_stops_a_command_with_one_line(capsys) -> None:
    import time

    from vgp_bench.run.process.signals import run_command

    def start_up_interrupted_three_times() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here
            time.sleep(5)
        finally:  # two more while unwinding (and in the exit's clean-up): ignored
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stop:
            run_command("vgp-train", start_up_interrupted_three_times)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # for atexit's handlers
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == "vgp-train: interrupted"


# ---------------------------------------------------------------- the first hour


def test_k_hat_not_computed_is_a_dash_not_zero_percent(tmp_path: Path) -> None:
    from vgp_bench.analysis.report.gaps import pareto_share

    run_dir = tmp_path / "run"
    metrics = train(compose_config([*QUICK, "eval.at_end=true"]), run_dir)  # S = 8 < 25
    assert metrics["test"]["pareto_k_mean"] is None
    assert metrics["test"]["pareto_k_above_0_7"] is None
    older = report.Run(run_dir, {"test": {"pareto_k_mean": None, "pareto_k_above_0_7": 0.0}}, {})
    assert pareto_share(older) is None  # a record of older code: shown as "—", not 0.0%


def test_every_table_row_shows_its_epochs_and_marks_deltas_off_the_papers_protocol(
    tmp_path: Path, capsys
) -> None:
    from tests.test_report import write_run

    test = {"nll": 120.0, "bound_nll": 125.0, "nll_stderr": 0.5, "bound_nll_stderr": 0.5}
    test |= {"is_samples": 5000, "n_examples": 10000, "is_below_bound": False}
    write_run(
        tmp_path / "smoke", model="dlgm1", inference="vae", seed=0, test=test,
        epochs_completed=5, experiment=None,
    )  # fmt: skip
    assert report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| method"))
    assert "| epochs |" in header
    row = next(line for line in out.splitlines() if "DLGM 1hl + VAE" in line)
    assert "| 5 |" in row and " *" in row
    assert "not the paper's protocol" in out


def test_threads_come_from_the_config_or_the_environment_and_are_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vgp_bench.run.process.runtime import apply_threads

    try:
        assert apply_threads(compose_config(["threads=2"]).threads).startswith("2 CPU threads")
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("VGP_THREADS", "3")
        assert compose_config([]).threads == "3"
        assert apply_threads(compose_config([]).threads).startswith("3 CPU threads")
        monkeypatch.delenv("VGP_THREADS")
        assert "torch's default" in apply_threads(compose_config([]).threads)
    finally:
        torch.set_num_threads(1)
    with pytest.raises(ConfigError, match=r"^threads must be an integer >= 1"):
        train(compose_config([*QUICK, "threads=abc"]), Path("never-created"))
    assert not Path("never-created").exists()


def test_tensorboard_has_the_test_metrics_and_the_runs_hyperparameters(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(compose_config([*QUICK, "eval.at_end=true"]), tmp_path)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"test/nll", "test/bound_nll", "hparam/test_nll"} <= scalars
    raw = b"".join(path.read_bytes() for path in (tmp_path / "tensorboard").glob("events.*"))
    assert b"_hparams_/session_start_info" in raw and b"trainer.batch_size" in raw


def test_long_phases_show_progress(capsys) -> None:
    from vgp_bench.blackbox import fit

    fit(lambda z: -0.5 * (z**2).sum(1), 2, family="mean_field", steps=3, progress=True)
    assert "fit mean_field" in capsys.readouterr().err  # vgp-fit: a bar per family


def test_vgp_fit_creates_its_log_only_with_a_record() -> None:
    hydra_cfg = compose_config([], config_name="fit", return_hydra_config=True).hydra
    assert hydra_cfg.job_logging.handlers.file.delay is True  # no empty log file
