"""Device-dependent paths, on every device present: the CPU here, CUDA too under `make gpu-check`.

The test suite hides GPUs (tests/conftest.py); scripts/gpu_check.py runs this file with the GPU
visible, so each test below then also runs on CUDA. The compile-mode and GPU-sharing selection
is pure logic and is exercised on the CPU with a stand-in CUDA device.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers import TINY, compose_config
from vgp_bench.errors import ConfigError
from vgp_bench.gp import cholesky_with_jitter
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.compilation import compile_mode
from vgp_bench.run.loop.evaluate import EvaluationRequest, evaluate_components
from vgp_bench.run.loop.trainer import Trainer
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import limit_gpu_memory, resolve_device

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
SMALL_VGP = ["inference=vgp", "inference.variational_data_size=8"]


def on(device: str) -> list[str]:
    """TINY on `device`."""
    return [*(o for o in TINY if not o.startswith("device=")), f"device={device}"]


@contextmanager
def no_host_sync(device: torch.device):
    """On CUDA, any host-device synchronization inside the block raises."""
    if device.type != "cuda":
        yield
        return
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


@pytest.mark.parametrize("device_name", DEVICES)
def test_sync_free_cholesky_matches_the_sequential_one_without_a_host_sync(device_name):
    device = torch.device(device_name)
    generator = torch.Generator().manual_seed(4)
    basis = torch.randn(6, 3, generator=generator, dtype=torch.float64)
    # smallest eigenvalue -5e-4: needs jitter 1e-3 = 1e-6 * 10^3, three retries
    indefinite = basis @ basis.T - 5e-4 * torch.eye(6, dtype=torch.float64)
    batch = torch.stack([indefinite, torch.eye(6, dtype=torch.float64)])
    sequential = cholesky_with_jitter(batch, sync_free=False)
    on_device = batch.to(device)
    with no_host_sync(device):
        sync_free = cholesky_with_jitter(on_device, sync_free=True)
    assert sequential.retries.tolist() == sync_free.retries.tolist() == [3, 0]
    torch.testing.assert_close(sync_free.factor.cpu(), sequential.factor)
    torch.testing.assert_close(sync_free.jitter.cpu(), sequential.jitter)


@pytest.mark.parametrize("device_name", DEVICES)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("inference", ["vae", "vgp"])
def test_training_runs_and_evaluates_on_the_device(tmp_path, device_name, precision, inference):
    extra = SMALL_VGP if inference == "vgp" else []
    cfg = compose_config(
        [*on(device_name), *extra, f"trainer.precision={precision}", "trainer.max_steps=3"]
    )
    metrics = train(cfg, tmp_path)
    assert metrics["status"] == "finished" and metrics["steps"] == 3
    assert metrics["test"]["n_examples"] == 16
    for key in ("nll", "bound_nll"):
        assert torch.isfinite(torch.tensor(metrics["test"][key])), key
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert all(bool(torch.isfinite(v).all()) for v in checkpoint["model"].values())


@pytest.mark.parametrize("device_name", DEVICES)
def test_resume_on_the_device_is_bit_identical(tmp_path: Path, device_name: str) -> None:
    common = [
        *on(device_name),
        *SMALL_VGP,
        "dataset.binarization=dynamic",
        "trainer.epochs=5",
        "eval.at_end=false",
    ]
    train(compose_config([*common, "trainer.max_steps=3"]), tmp_path / "resumed")
    train(compose_config([*common, "trainer.max_steps=7"]), tmp_path / "resumed")
    train(compose_config([*common, "trainer.max_steps=7"]), tmp_path / "straight")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "last.pt")
    straight = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    assert resumed["state"]["step"] == straight["state"]["step"] == 7
    for part in ("model", "heads"):
        for name, value in straight[part].items():
            assert torch.equal(resumed[part][name], value), name


@pytest.mark.parametrize("device_name", DEVICES)
def test_the_evaluator_gives_the_same_estimate_in_any_chunking(device_name: str) -> None:
    cfg = compose_config([*on(device_name), *SMALL_VGP])
    parts = build_components(cfg)
    results = []
    for chunk_size in (3, 12):
        eval_cfg = OmegaConf.merge(cfg.eval, {"chunk_size": chunk_size, "subset": 8})
        request = EvaluationRequest(12)
        results.append(evaluate_components(parts, eval_cfg, DistributedContext(), request))
    assert results[0].n_examples == results[1].n_examples == 8
    assert results[0].nll <= results[0].bound_nll + 1.0
    for value in (results[0].nll, results[0].bound_nll):
        assert torch.isfinite(torch.tensor(value))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_graphed_compiled_step_matches_the_eager_step(tmp_path: Path) -> None:
    """compile=true on CUDA (reduce-overhead: CUDA graphs) trains as eager does: fresh noise
    every step, no fallback, parameters equal to float tolerance."""
    common = [*on("cuda"), *SMALL_VGP, "trainer.max_steps=4", "eval.at_end=false"]
    train(compose_config(common), tmp_path / "eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(compose_config([*common, "trainer.compile=true"]), tmp_path / "graphed")
    assert not [w for w in caught if "trainer.compile" in str(w.message)]
    eager = load_checkpoint(tmp_path / "eager" / "checkpoints" / "last.pt")
    graphed = load_checkpoint(tmp_path / "graphed" / "checkpoints" / "last.pt")
    for part in ("model", "heads"):
        for name, value in eager[part].items():
            torch.testing.assert_close(graphed[part][name], value, rtol=1e-3, atol=1e-4)


def test_compile_mode_captures_cuda_graphs_on_cuda_only() -> None:
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert compile_mode("auto", cuda) == "reduce-overhead"
    assert compile_mode("auto", cpu) is None
    assert compile_mode("default", cuda) is None
    assert compile_mode("max-autotune", cpu) == "max-autotune"
    with pytest.raises(ConfigError, match=r"trainer\.compile_mode must be one of"):
        compile_mode("fast", cpu)


@pytest.mark.parametrize(("device_type", "graphed"), [("cuda", True), ("cpu", False)])
def test_the_trainer_asks_for_cuda_graphs_on_cuda_and_marks_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_type: str, graphed: bool
) -> None:
    """The selection as the trainer makes it, on CPU tensors with a stand-in device type."""
    requested: list[dict] = []

    def recording_compile(module, **kwargs):
        requested.append(kwargs)
        return module  # run eagerly: only the selection is under test

    marks: list[int] = []
    monkeypatch.setattr(torch, "compile", recording_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    cfg = compose_config([*TINY, "trainer.compile=true", "trainer.micro_batches=2"])
    trainer = Trainer(cfg, tmp_path, build_components(cfg))
    real_device = trainer.parts.device
    trainer.parts.device = torch.device(device_type)
    trainer.prepare_objective()
    trainer.parts.device = real_device
    assert requested == ([{"mode": "reduce-overhead"}] if graphed else [{}])
    assert trainer.graphed_steps is graphed
    stats = trainer.training_step(torch.arange(16))
    bound, finite = stats.bound, stats.finite
    assert finite and torch.isfinite(bound)
    assert len(marks) == (2 if graphed else 0)  # one graph step per shard


def test_sweep_jobs_share_the_gpus_round_robin() -> None:
    assert resolve_device("auto", job_number=5, gpu_count=4) == torch.device("cuda", 1)
    assert resolve_device("auto", job_number=3, gpu_count=1) == torch.device("cuda", 0)
    assert resolve_device("auto", job_number=None, gpu_count=2) == torch.device("cuda", 0)
    assert resolve_device("auto", job_number=7, gpu_count=0) == torch.device("cpu")
    assert resolve_device("cpu", job_number=7, gpu_count=4) == torch.device("cpu")


def test_gpu_memory_fraction_is_checked_and_a_no_op_on_cpu() -> None:
    limit_gpu_memory(torch.device("cpu"), 0.25)
    limit_gpu_memory(torch.device("cpu"), None)
    with pytest.raises(ConfigError, match=r"trainer\.gpu_memory_fraction must be in \(0, 1\]"):
        limit_gpu_memory(torch.device("cpu"), 1.5)
