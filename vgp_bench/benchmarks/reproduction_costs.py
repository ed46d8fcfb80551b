"""What reproducing each Table 1 and Table 2 row costs (and the calibrated study's control and
2-layer VAE, which its README prices): its command, its training steps, the
measured time of a step and of its test evaluation on this machine's CPU, the CPU-hours they
add up to, and an estimate of the same on one GPU.

    scripts/reproduction_costs.py --out results/reproduction   # costs.md and costs.json, and
                                                               # the table in README.md
                                                               # (vgp_bench/studies/reproduction)

Each row is its `configs/experiment/` file as `vgp-train experiment=<name>` runs it: steps =
trainer.epochs x batches per epoch (a run that stops early costs less); a step is timed on a
few steps of the real loop (untrained parameters: the time depends on shapes, not values); the
test evaluation (the final one at eval.is_samples, plus one at eval.epoch_is_samples for each of
trainer.eval_at_epochs, on the test images the row evaluates) from one eval batch
(`vgp_bench/benchmarks/evaluation_time.py`). One process, one thread. Table 2's rows run on
synthetic images of Sketch's shape and sizes (56x56, 18,000 train, 2,000 test): the times
depend on shapes only, and no Sketch file is needed.

The GPU columns are a model, not a measurement (`vgp_bench/benchmarks/gpu_estimate.py`): the
kernels of one traced step and of the traced evaluation batch, priced by a launch-and-roofline
model of one H200, as a range. The evaluation batch is timed while it is traced (the tracer's
own cost, microseconds an operator, is small beside an evaluation's large batches).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from vgp_bench.benchmarks.evaluation_time import evaluation_run
from vgp_bench.benchmarks.families import data_overrides
from vgp_bench.benchmarks.gpu_estimate import (
    GpuModel,
    KernelTrace,
    estimated_seconds,
    trace_of,
    trace_training_step,
)
from vgp_bench.benchmarks.overhead import make_trainer, run_steps
from vgp_bench.run.config.store import compose_config
from vgp_bench.run.config.typed import eval_settings, trainer_settings

ROWS = [
    "burda_dlgm1_vae",
    "burda_dlgm1_vgp",
    "burda_dlgm1_vgp_control",
    "burda_dlgm2_vae",
    "table1_dlgm1_vae",
    "table1_dlgm1_vgp",
    "table1_dlgm1_nf",
    "table1_dlgm1_hvi",
    "table1_dlgm2_vae",
    "table1_dlgm2_iwae",
    "table1_dlgm2_vgp",
    "table1_dlgm2_vgp_iwae",
    "table1_draw_vae",
    "table1_draw_vgp",
    "table2_draw_vae",
    "table2_draw_vgp",
]
SLOW = ("draw",)  # a step takes seconds: time fewer steps and fewer samples
SKETCH_SHAPED = [
    "dataset=synthetic",
    "dataset.shape=[1,56,56]",
    "dataset.n_train=18000",
    "dataset.n_valid=100",
    "dataset.n_test=2000",
]


def row_data(name: str) -> list[str]:
    """The dataset overrides a row is timed on: Sketch-shaped images for Table 2, else the
    converted MNIST (a clear error without it: synthetic stand-ins would change the sizes)."""
    if name.startswith("table2"):
        return SKETCH_SHAPED
    data = data_overrides()
    if data[0] != "dataset=mnist":
        raise SystemExit(
            "scripts/reproduction_costs.py: Table 1's rows are timed on the converted MNIST; "
            "run `make data` first"
        )
    return data


def test_work(cfg: DictConfig, test_images: int) -> dict[str, int]:
    """The images and importance samples of a row's test evaluations: the final one and one
    for each of trainer.eval_at_epochs."""
    subset = cfg.eval.subset
    images = test_images if subset is None else min(int(subset), test_images)
    at_epochs = len(cfg.trainer.eval_at_epochs or [])
    settings = eval_settings(cfg)
    samples = settings.is_samples + at_epochs * settings.epoch_is_samples
    return {"images": images, "samples": samples}


def validation_work(cfg: DictConfig, valid_images: int) -> dict[str, int]:
    """The images and samples of the validation bound a row computes after every epoch (none
    without a validation split, as Sketch has none, or with trainer.valid_samples = 0)."""
    trainer = trainer_settings(cfg)
    samples, subset = trainer.valid_samples, trainer.valid_subset or 0
    images = min(subset, valid_images) if subset else valid_images
    return {"images": images if samples else 0, "samples": samples}


def hours(seconds: float) -> float:
    """Hours, to four significant digits (a GPU's evaluations take seconds)."""
    return float(f"{seconds / 3600:.4g}")


def timed_then_traced(
    timed: Callable[[], Any], traced: Callable[[], Any]
) -> tuple[float, KernelTrace]:
    """Seconds of one untraced call of `timed`, then the kernels of `traced` (the tracer costs
    tens of microseconds an operator, so nothing is timed under it)."""
    started = time.perf_counter()
    timed()
    seconds = time.perf_counter() - started
    return seconds, trace_of(traced)


def evaluation_cost(
    name: str,
    data: list[str],
    cfg: DictConfig,
    split_name: str,
    samples: int,
    images: int,
    slow: bool,
) -> dict[str, Any]:
    """One split's evaluation at `samples` a image: timed on a few eval batches (one when slow)
    with up to a thousand samples, traced on one batch and one chunk of samples, each scaled
    to `images` x `samples` (`cfg`: the row's composed config, for its eval batch and chunk);
    seconds and the GPU model's trace."""
    overrides = [f"experiment={name}"]
    settings = eval_settings(cfg)
    batch, chunk = settings.batch_size, settings.chunk_size
    timed_samples = min(samples, 100 if slow else 1000)
    timed_images = batch if slow else min(images, 10 * batch)
    timed, sizes = evaluation_run(overrides, timed_samples, data, split_name, timed_images)
    traced, _ = evaluation_run(overrides, min(samples, chunk), data, split_name, batch)
    seconds, trace = timed_then_traced(timed, traced)
    return {
        "timed": {**sizes, "seconds": round(seconds, 3)},
        "seconds": seconds * (images / sizes["images_timed"]) * (samples / timed_samples),
        "trace": trace,
        "trace_scale": (images / batch) * (samples / min(samples, chunk)),
    }


def row_cost(name: str, gpu: GpuModel) -> dict[str, Any]:
    """The measured CPU costs of `vgp-train experiment=<name>`, and the GPU model's range."""
    data = row_data(name)
    cfg = compose_config([*data, f"experiment={name}"])  # as vgp-train composes it
    trainer = make_trainer([f"experiment={name}"], data=data)  # (no checkpoints, no end)
    slow = any(word in name for word in SLOW)
    run_steps(trainer, 1 if slow else 3)  # warm-up
    step_seconds = run_steps(trainer, 2 if slow else 20)
    step_trace = trace_training_step(trainer)
    parts = trainer.parts
    trainer = trainer_settings(cfg)
    batches = parts.data.train.batch_count(trainer.batch_size, trainer.drop_last)
    epochs = trainer.epochs
    steps = epochs * batches
    work = test_work(cfg, len(parts.data.test))
    test = evaluation_cost(name, data, cfg, "test", work["samples"], work["images"], slow)
    has_valid = parts.data.valid is not None and data is not SKETCH_SHAPED  # Sketch: none
    valid_work = validation_work(cfg, len(parts.data.valid) if has_valid else 0)
    validation = (
        evaluation_cost(name, data, cfg, "valid", valid_work["samples"], valid_work["images"], slow)
        if valid_work["images"]
        else None
    )
    step_gpu = estimated_seconds(step_trace, gpu)
    test_gpu = [value * test["trace_scale"] for value in estimated_seconds(test["trace"], gpu)]
    valid_gpu = [0.0, 0.0]
    if validation:
        scale = validation["trace_scale"] * epochs
        valid_gpu = [value * scale for value in estimated_seconds(validation["trace"], gpu)]
    valid_seconds = validation["seconds"] * epochs if validation else 0.0
    return {
        "command": f"vgp-train experiment={name}",
        "data": "Sketch-shaped synthetic" if data is SKETCH_SHAPED else data[0].split("=")[1],
        "epochs": epochs,
        "steps": steps,
        "batch_size": trainer.batch_size,
        "step_ms": round(1000 * step_seconds, 2),
        "steps_cpu_hours": hours(steps * step_seconds),
        "validation": {**valid_work, "timed": validation["timed"] if validation else None},
        "validation_cpu_hours": hours(valid_seconds),
        "training_cpu_hours": hours(steps * step_seconds + valid_seconds),
        "test_is_samples": eval_settings(cfg).is_samples,
        "test_images": work["images"],
        "test_evaluations": work,
        "evaluation_timed": test["timed"],
        "evaluation_cpu_hours": hours(test["seconds"]),
        "gpu_model": {
            "step": step_trace.summary(gpu),
            "evaluation_batch": test["trace"].summary(gpu),
            "validation_batch": validation["trace"].summary(gpu) if validation else None,
            "step_ms": [round(1000 * value, 2) for value in step_gpu],
            "training_hours": [
                hours(steps * value + valid) for value, valid in zip(step_gpu, valid_gpu)
            ],
            "evaluation_hours": [hours(value) for value in test_gpu],
        },
    }


def gpu_record(gpu: GpuModel) -> dict[str, Any]:
    """The GPU model as costs.json stores it (tuples become lists)."""
    return json.loads(json.dumps(asdict(gpu)))


def kept_rows(old: dict[str, Any], gpu: GpuModel) -> dict[str, Any]:
    """The rows of a costs.json record a partial measurement keeps: all of them when they were
    priced on this GPU model, none otherwise (they are measured again)."""
    return dict(old.get("rows", {})) if old.get("gpu") == gpu_record(gpu) else {}


def measure(out: Path, rows: list[str], note: str) -> dict[str, Any]:
    """Measure `rows` into out/costs.json (keeping its other rows priced on this GPU model),
    one row at a time, each with the conditions it was measured in; the record."""
    from vgp_bench.run.process.host_memory import keep_freed_memory
    from vgp_bench.run.process.runtime import code_version

    torch.set_num_threads(1)
    malloc = keep_freed_memory()  # as vgp-train runs: the steps' large buffers reused
    gpu = GpuModel()
    path = out / "costs.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    record: dict[str, Any] = {"gpu": gpu_record(gpu), "rows": kept_rows(old, gpu)}
    out.mkdir(parents=True, exist_ok=True)
    version = code_version()  # before this run writes its own files into the checkout
    for name in rows:
        print(f"{name} ...", flush=True)
        conditions = {
            "measured": time.strftime("%Y-%m-%d %H:%M"),
            "code_version": version,
            "load_average": [round(value, 1) for value in os.getloadavg()],
            "malloc": malloc,
            "note": note,
        }
        record["rows"][name] = {**row_cost(name, gpu), **conditions}
        record["rows"] = {row: record["rows"][row] for row in ROWS if row in record["rows"]}
        path.write_text(json.dumps(record, indent=2))
    return record
