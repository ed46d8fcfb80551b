"""The trainer: end-to-end runs, exact resume, checkpoints, health checks, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException

from tests.helpers import REPO, TINY, compose_config
from vgp_bench.errors import ConfigError, NonFiniteTrainingError
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import load_checkpoint, save_checkpoint
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.trainer import Trainer


def parameters_of(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    return {**checkpoint["model"], **{f"heads.{k}": v for k, v in checkpoint["heads"].items()}}


def assert_same_parameters(first: Path, second: Path) -> None:
    left, right = parameters_of(first), parameters_of(second)
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), name


def test_a_run_writes_everything_a_run_folder_holds(tmp_path: Path) -> None:
    metrics = train(compose_config(TINY), tmp_path)
    for name in ("config.yaml", "metrics.json", "samples.png", "reconstructions.png"):
        assert (tmp_path / name).is_file(), name
    assert (tmp_path / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "checkpoints" / "best.pt").is_file()
    assert any((tmp_path / "tensorboard").iterdir())
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["status"] == metrics["status"] == "finished"
    assert saved["epochs_completed"] == 2 and saved["steps"] == 8
    assert [entry["epoch"] for entry in saved["history"]] == [1, 2]
    assert {"train_bound", "valid_bound"} <= set(saved["history"][-1])
    test = saved["test"]
    assert test["is_samples"] == 8 and test["n_examples"] == 16
    assert test["nll"] <= test["bound_nll"] + 0.05  # IS estimate above the bound on average
    assert saved["dataset"]["name"] == "synthetic"
    assert saved["dataset"]["split_sizes"] == {"train": 64, "valid": 16, "test": 16}
    assert saved["model"] == "dlgm1" and saved["inference"] == "vae" and saved["seed"] == 0
    assert saved["code_version"].startswith("0.1.0")


@pytest.mark.parametrize("binarization", ["fixed", "dynamic"])
def test_resume_is_bit_identical(tmp_path: Path, binarization: str) -> None:
    common = [
        *TINY,
        f"dataset.binarization={binarization}",
        "trainer.epochs=5",
        "trainer.checkpoint_every=3",
        "eval.at_end=false",
    ]
    # 4 steps per epoch: stop mid-epoch (step 6), then resume to step 13
    train(compose_config([*common, "trainer.max_steps=6"]), tmp_path / "resumed")
    train(compose_config([*common, "trainer.max_steps=13"]), tmp_path / "resumed")
    train(compose_config([*common, "trainer.max_steps=13"]), tmp_path / "straight")
    assert_same_parameters(tmp_path / "resumed", tmp_path / "straight")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    straight = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    assert resumed["state"]["step"] == straight["state"]["step"] == 13
    assert all(torch.equal(a, b) for a, b in zip(resumed["generators"], straight["generators"]))
    for left, right in zip(
        resumed["optimizer"]["state"].values(), straight["optimizer"]["state"].values()
    ):
        for key in left:
            assert torch.equal(torch.as_tensor(left[key]), torch.as_tensor(right[key]))


def test_resuming_with_another_model_is_refused(tmp_path: Path) -> None:
    train(compose_config([*TINY, "trainer.max_steps=2", "eval.at_end=false"]), tmp_path)
    with pytest.raises(ValueError, match="different 'model' config"):
        train(compose_config([*TINY, "model.latent_dims=[4]"]), tmp_path)


def test_checkpoint_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint({"value": torch.ones(2)}, path)

    def exploding_save(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", exploding_save)
    with pytest.raises(OSError):
        save_checkpoint({"value": torch.zeros(2)}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["value"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    path.write_bytes(b"truncated")
    with pytest.raises(ValueError, match="unreadable"):
        load_checkpoint(path)


def test_nonfinite_bounds_are_skipped_then_stop_the_run(tmp_path: Path) -> None:
    cfg = compose_config([*TINY, "trainer.max_nonfinite=3", "trainer.checkpoint_every=1"])
    parts = build_components(cfg)
    original_forward = parts.model.forward
    calls = {"count": 0}

    def sometimes_nan(x, heads, n_samples=1, generator=None):
        calls["count"] += 1
        trace = original_forward(x, heads, n_samples, generator)
        if calls["count"] == 2 or calls["count"] >= 5:  # one isolated NaN, then NaN for good
            trace.log_p = trace.log_p + float("nan")
        return trace

    parts.model.forward = sometimes_nan  # type: ignore[method-assign]
    trainer = Trainer(cfg, tmp_path, parts)
    with pytest.raises(NonFiniteTrainingError, match="3 steps in a row"):
        trainer.fit()
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "NaN/Inf" in metrics["error"]
    assert trainer.state.nonfinite_total == 4 and trainer.state.step == 3
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert checkpoint["state"]["step"] == 3
    assert all(torch.isfinite(v).all() for v in checkpoint["model"].values())


def train_command() -> list[str]:
    """The installed `vgp-train` console script (as users run it), else `python -m`."""
    script = Path(sys.executable).parent / "vgp-train"
    return (
        [str(script)] if script.exists() else [sys.executable, "-m", "vgp_bench.run.commands.train"]
    )


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*train_command(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_cli_runs_end_to_end_with_overrides(tmp_path: Path) -> None:
    result = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "-log p(x)" in result.stdout
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "finished"
    assert (tmp_path / "run" / ".hydra" / "overrides.yaml").is_file()  # written by vgp-train
    assert "finished at step 8" in (tmp_path / "run" / "train.log").read_text()


def test_cli_unknown_values_fail_clearly(tmp_path: Path) -> None:
    result = run_cli([*TINY, "model=no_such_model"], cwd=tmp_path)
    assert result.returncode != 0
    assert "Could not find 'model/no_such_model'" in result.stderr
    with pytest.raises(ConfigCompositionException, match="no_such_key"):
        compose_config([*TINY, "trainer.no_such_key=1"])


def test_cli_missing_data_is_one_line(tmp_path: Path) -> None:
    result = run_cli(
        [
            "dataset=mnist",
            f"data_dir={tmp_path}",
            "device=cpu",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "vgp-data mnist" in lines[0], result.stderr


def test_sigterm_checkpoints_and_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    common = [
        *TINY,
        "dataset.n_train=640",
        "trainer.epochs=3",
        "eval.at_end=false",
        "trainer.image_every=0",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    interrupted = tmp_path / "interrupted"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgp_bench.run.commands.train",
            *common,
            f"hydra.run.dir={interrupted}",
            "trainer.log_every=1",
            "trainer.checkpoint_every=1000",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until training has started
        metrics_file = interrupted / "metrics.json"
        if (interrupted / "tensorboard").exists() and metrics_file.exists():
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr  # 128 + SIGTERM, as shells and schedulers expect
    assert "SIGTERM" in stderr
    assert json.loads((interrupted / "metrics.json").read_text())["status"] == "interrupted"
    assert (
        run_cli(
            [*common, f"hydra.run.dir={interrupted}", "trainer.log_every=1"], cwd=tmp_path
        ).returncode
        == 0
    )
    straight = tmp_path / "straight"
    assert (
        run_cli(
            [*common, f"hydra.run.dir={straight}", "trainer.log_every=1"], cwd=tmp_path
        ).returncode
        == 0
    )
    assert_same_parameters(interrupted, straight)
    assert json.loads((interrupted / "metrics.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("inference", ["vae", "vgp"])
def test_bf16_autocast_runs_and_keeps_the_gp_in_float32(tmp_path: Path, inference: str) -> None:
    overrides = [*TINY, f"inference={inference}", "inference.variational_data_size=8"]
    if inference == "vae":
        overrides = overrides[:-1]
    metrics = train(
        compose_config([*overrides, "trainer.precision=bf16", "trainer.max_steps=3"]), tmp_path
    )
    assert metrics["status"] == "finished" and metrics["steps"] == 3
    if inference == "vgp":
        cfg = compose_config(overrides)
        parts = build_components(cfg)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            context = torch.randn(2, parts.model.sites["z"].context_dim).bfloat16()
            site = parts.heads["z"](context, 3)
        assert site.z.dtype == torch.float32 and site.log_q.dtype == torch.float32


def test_compile_falls_back_to_eager_with_a_warning(tmp_path: Path, monkeypatch) -> None:
    def broken_compile(module, *args, **kwargs):
        def fails(*call_args, **call_kwargs):
            raise RuntimeError("backend unavailable")

        return fails

    monkeypatch.setattr(torch, "compile", broken_compile)
    # the Trainer itself: vgp-train refuses compile on CPU before it gets this far (below)
    cfg = compose_config([*TINY, "trainer.compile=true", "trainer.max_steps=2"])
    trainer = Trainer(cfg, tmp_path, build_components(cfg))
    with pytest.warns(UserWarning, match="falling back to eager"):
        trainer.prepare_objective()
        stats = trainer.training_step(torch.arange(4))
    assert stats.finite and torch.isfinite(stats.bound)


def test_compile_is_refused_on_cpu_with_the_measured_reason(tmp_path: Path) -> None:
    cfg = compose_config([*TINY, "device=cpu", "trainer.compile=true"])
    with pytest.raises(ConfigError, match="refused on CPU: compiled steps measured slower"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_unknown_precision_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"trainer\.precision must be fp32 or bf16"):
        train(compose_config([*TINY, "trainer.precision=fp8"]), tmp_path)


def test_vgp_eval_re_evaluates_a_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config([*TINY, "eval.at_end=false", "trainer.max_steps=2"]), run_dir)
    script = Path(sys.executable).parent / "vgp-eval"
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-m", "vgp_bench.run.commands.eval_command"]
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            *command,
            f"checkpoint={run_dir / 'checkpoints' / 'last.pt'}",
            "eval.is_samples=6",
            "eval.subset=10",
            "eval.save_per_example=true",
            "device=cpu",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "-log p(x)" in result.stdout
    test = json.loads((run_dir / "metrics.json").read_text())["test"]
    assert test["is_samples"] == 6 and test["n_examples"] == 10 and test["checkpoint"] == "last.pt"
    assert (run_dir / test["per_example_file"]).is_file()
    assert "result" in (run_dir / "eval.log").read_text()  # its log in the run folder
    assert not list(tmp_path.glob("*.log"))  # and none in the current folder
    missing = subprocess.run(
        [*command, f"checkpoint={tmp_path / 'nothing.pt'}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_per_example_files_of_one_run_never_overwrite_each_other(tmp_path: Path) -> None:
    """vgp-eval of two checkpoints, and of a subset beside the whole split, keep four files."""
    import h5py
    from omegaconf import OmegaConf

    from vgp_bench.run.commands.eval_command import evaluate_checkpoint

    run_dir = tmp_path / "run"
    common = [*TINY, "eval.at_end=false", "trainer.image_every=0"]
    train(compose_config([*common, "trainer.epochs=1"]), run_dir)
    earlier = run_dir / "checkpoints" / "epoch1.pt"
    earlier.write_bytes((run_dir / "checkpoints" / "last.pt").read_bytes())
    train(compose_config([*common, "trainer.epochs=2"]), run_dir)
    for checkpoint in (earlier, run_dir / "checkpoints" / "last.pt"):
        for subset in (None, 5):
            settings = OmegaConf.create(
                {"is_samples": 3, "subset": subset, "save_per_example": True}
            )
            evaluate_checkpoint(str(checkpoint), settings, device_name="cpu")
    evaluations = json.loads((run_dir / "metrics.json").read_text())["evaluations"]
    names = [evaluation["per_example_file"] for evaluation in evaluations]
    assert len(set(names)) == 4 and {e["step"] for e in evaluations} == {4, 8}
    for evaluation in evaluations:  # each file still holds what its record measured
        with h5py.File(run_dir / evaluation["per_example_file"]) as handle:
            log_likelihood = handle["log_likelihood"][:]
        assert len(log_likelihood) == evaluation["n_examples"] == (evaluation["subset"] or 16)
        assert -log_likelihood.mean() == pytest.approx(evaluation["nll"], rel=1e-6)
    assert "test_per_example_k3_first5_step4.h5" in names


def test_a_step_budget_ending_an_epoch_completes_it(tmp_path: Path) -> None:
    # 64 examples / 16 = 4 batches: max_steps=4 ends exactly at the end of epoch 1
    full = tmp_path / "full"  # beside the next run: a run folder holds no other run
    metrics = train(compose_config([*TINY, "trainer.max_steps=4", "eval.at_end=false"]), full)
    assert metrics["epochs_completed"] == 1 and [h["epoch"] for h in metrics["history"]] == [1]
    assert "valid_bound" in metrics["history"][0] and (full / "samples.png").is_file()
    short = tmp_path / "short"
    train(compose_config([*TINY, "trainer.max_steps=2", "eval.at_end=false"]), short)
    assert (short / "samples.png").is_file()  # images even when no epoch completed


@pytest.mark.parametrize("check_gradients", [True, False])
def test_a_nan_gradient_never_reaches_a_checkpoint(tmp_path: Path, check_gradients: bool) -> None:
    cfg = compose_config(
        [
            *TINY,
            "trainer.checkpoint_every=1",
            "trainer.max_nonfinite=3",
            f"trainer.check_gradients={str(check_gradients).lower()}",
        ]
    )
    parts = build_components(cfg)
    calls = {"count": 0}

    def poison_once(gradient: torch.Tensor) -> torch.Tensor:
        calls["count"] += 1
        return gradient * float("nan") if calls["count"] == 3 else gradient

    next(parts.model.parameters()).register_hook(poison_once)
    trainer = Trainer(cfg, tmp_path, parts)
    if check_gradients:  # the poisoned update is skipped and the run goes on
        metrics = trainer.fit()
        assert metrics["status"] == "finished" and metrics["nonfinite_skipped"] == 1
    else:  # the update lands; the run stops before a NaN parameter is saved
        with pytest.raises(NonFiniteTrainingError, match="parameters became NaN/Inf"):
            trainer.fit()
        checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
        assert checkpoint["state"]["step"] == 2
        assert all(torch.isfinite(v).all() for v in checkpoint["model"].values())


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_the_multi_tensor_update_trains_bit_for_bit_as_the_per_tensor_loop(
    tmp_path: Path, optimizer: str
) -> None:
    common = [*TINY, f"optim={optimizer}", "trainer.max_steps=5", "eval.at_end=false"]
    cfg = compose_config([*common, "+optim.optimizer.foreach=true"])
    assert all(group["foreach"] for group in build_components(cfg).optimizer.param_groups)
    train(cfg, tmp_path / "foreach")
    loop = compose_config([*common, "+optim.optimizer.foreach=false"])
    assert not any(group["foreach"] for group in build_components(loop).optimizer.param_groups)
    train(loop, tmp_path / "loop")
    assert_same_parameters(tmp_path / "foreach", tmp_path / "loop")
    # the CPU default: all tensors at once, but for the RMSprop whose CPU update is its own
    default = build_components(compose_config(common)).optimizer.param_groups
    assert all(group["foreach"] is (optimizer == "adam") for group in default)


def test_a_fixed_model_from_another_run_keeps_its_weights_and_trains_only_q(
    tmp_path: Path,
) -> None:
    common = [*TINY, "eval.at_end=false"]
    train(compose_config(common), tmp_path / "source")
    source = tmp_path / "source" / "checkpoints" / "best.pt"
    fixed = [
        *common,
        "inference=vgp",
        f"trainer.init_model={source}",
        "trainer.train_model=false",
        "seed=1",
    ]
    train(compose_config([*fixed, "trainer.max_steps=5"]), tmp_path / "fixed")
    start = load_checkpoint(source)
    after = load_checkpoint(tmp_path / "fixed" / "checkpoints" / "last.pt")
    assert start["model"].keys() == after["model"].keys()
    for name, value in start["model"].items():
        assert torch.equal(value, after["model"][name]), name  # p(x, z) untouched
    fresh = build_components(compose_config(fixed))
    assert any(
        not torch.equal(value, after["heads"][name])
        for name, value in fresh.heads.state_dict().items()
    )  # q trained
    assert all(not p.requires_grad for p in fresh.model.parameters())
    assert len(fresh.optimizer.param_groups[0]["params"]) == len(list(fresh.heads.parameters()))
    # the resume continues bit for bit (the weights come from the checkpoint, not init_model)
    train(compose_config([*fixed, "trainer.max_steps=8"]), tmp_path / "fixed")
    train(compose_config([*fixed, "trainer.max_steps=8"]), tmp_path / "straight")
    assert_same_parameters(tmp_path / "fixed", tmp_path / "straight")


def test_init_model_of_another_model_is_a_clear_error(tmp_path: Path) -> None:
    train(compose_config([*TINY, "eval.at_end=false"]), tmp_path / "source")
    source = tmp_path / "source" / "checkpoints" / "last.pt"
    other = [*TINY, "model.hidden_dims=[[8]]", f"trainer.init_model={source}"]
    with pytest.raises(ValueError, match="holds another model than model=dlgm1"):
        train(compose_config(other), tmp_path / "other")
    with pytest.raises(ValueError, match="not found"):
        train(compose_config([*TINY, "trainer.init_model=/no/such.pt"]), tmp_path / "missing")


def test_the_heads_diagnostics_come_on_logging_steps_only_and_change_no_parameter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that logs nothing asks the heads for no diagnostics (the VGP's jitter, kernel);
    which steps log changes no trained number."""
    common = [*TINY, "inference=vgp", "inference.variational_data_size=16", "eval.at_end=false"]
    cfg = compose_config(common)
    trainer = Trainer(cfg, tmp_path / "steps", build_components(cfg))
    trainer.prepare_objective()
    head = trainer.parts.heads["z"]
    made = []
    diagnostics = head.extras
    monkeypatch.setattr(head, "extras", lambda data: made.append(1) or diagnostics(data))
    indices = torch.arange(int(cfg.trainer.batch_size))
    assert trainer.training_step(indices, with_terms=False).extras == {} and not made
    assert head.reports_extras  # the head's own setting, restored
    logged = trainer.training_step(indices, with_terms=True)
    assert {"z/jitter", "z/cholesky_retries", "z/kernel_variance"} <= set(logged.extras)
    assert made == [1]
    for log_every in (1, 1000):
        run = compose_config([*common, "trainer.max_steps=6", f"trainer.log_every={log_every}"])
        train(run, tmp_path / f"log_every_{log_every}")
    assert_same_parameters(tmp_path / "log_every_1", tmp_path / "log_every_1000")
