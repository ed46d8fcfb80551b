#!/usr/bin/env python
"""What reproducing each Table 1 and Table 2 row costs: its command, its training steps, the
measured time of a step and of its test evaluation on this machine's CPU, the CPU-hours they
add up to, and an estimate of the same on one GPU.

    scripts/reproduction_costs.py --out results/reproduction   # costs.md and costs.json, and
                                                               # the table in README.md

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

import argparse
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
from vgp_bench.run.runtime import compose_config

ROWS = [
    "burda_dlgm1_vae",
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
    samples = int(cfg.eval.is_samples) + at_epochs * int(cfg.eval.epoch_is_samples)
    return {"images": images, "samples": samples}


def validation_work(cfg: DictConfig, valid_images: int) -> dict[str, int]:
    """The images and samples of the validation bound a row computes after every epoch (none
    without a validation split, as Sketch has none, or with trainer.valid_samples = 0)."""
    samples = int(cfg.trainer.valid_samples or 0)
    subset = int(cfg.trainer.valid_subset or 0)
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
    batch, chunk = int(cfg.eval.batch_size), int(cfg.eval.chunk_size)
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
    batches = parts.data.train.batch_count(int(cfg.trainer.batch_size), bool(cfg.trainer.drop_last))
    epochs = int(cfg.trainer.epochs)
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
        "batch_size": int(cfg.trainer.batch_size),
        "step_ms": round(1000 * step_seconds, 2),
        "steps_cpu_hours": hours(steps * step_seconds),
        "validation": {**valid_work, "timed": validation["timed"] if validation else None},
        "validation_cpu_hours": hours(valid_seconds),
        "training_cpu_hours": hours(steps * step_seconds + valid_seconds),
        "test_is_samples": int(cfg.eval.is_samples),
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


def number_cell(value: float) -> str:
    """A number for the table: whole from 100, one decimal from 1, else two significant
    digits."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:#.2g}"


def range_cell(values: list[float]) -> str:
    """A model's (low, high) range as text."""
    low, high = values
    return f"{number_cell(low)}–{number_cell(high)}"


def test_work_cell(row: dict[str, Any]) -> str:
    """A row's test evaluations: images x samples (the final one's, plus those at epochs)."""
    work = row["test_evaluations"]
    extra = work["samples"] - row["test_is_samples"]
    return f"{work['images']} x {row['test_is_samples']}" + (f" (+{extra})" if extra else "")


def validation_cell(row: dict[str, Any]) -> str:
    """A row's validation after every epoch: images x samples, or none."""
    work = row["validation"]
    return f"{work['images']} x {work['samples']}" if work["images"] else "none"


def markdown(record: dict[str, Any]) -> str:
    """costs.md: the intro with the conditions, then a row per experiment."""
    gpu = record["gpu"]
    rows = list(record["rows"].values())
    versions = sorted({row["code_version"] for row in rows})
    times = sorted(row["measured"] for row in rows)
    notes = sorted({row["note"] for row in rows if row["note"]})
    lines = [
        f"Measured {times[0]} to {times[-1]} at {', '.join(versions)}, one thread"
        + "".join(f"; {note}" for note in notes)
        + " (each row's load average at its start is in costs.json; with other jobs running the "
        "CPU times are upper bounds for an idle core). Table 2's rows are timed on synthetic "
        "images of Sketch's shape and sizes (56x56, 18,000 train, 2,000 test; Sketch has no "
        "validation split). Training: the steps plus the validation bound after every epoch; "
        "not counted: the VGP's per-epoch head statistics, sample images and checkpoints. Test "
        "images x S: the final test evaluation, plus the samples of the evaluations at "
        "trainer.eval_at_epochs.",
        "",
        f"**The GPU columns are a model, not a measurement** ({gpu['name']}; no GPU has been "
        "lent to this project): the kernels of one traced step and of one traced evaluation "
        f"batch, each at least {gpu['min_kernel_seconds'] * 1e6:g} µs, else its FLOPs or bytes "
        f"at {gpu['achieved_fraction']:g} of the peak "
        f"({gpu['peak_flops_per_second'] / 1e12:g} TFLOP/s, "
        f"{gpu['peak_bytes_per_second'] / 1e12:g} TB/s), and an assumed host cost of "
        f"{gpu['host_seconds_per_kernel'][0] * 1e6:g} to "
        f"{gpu['host_seconds_per_kernel'][1] * 1e6:g} µs a kernel; low: host and device "
        "overlapped, high: one after the other (which also covers waits at host syncs). "
        "`make gpu-check` on a GPU measures the steps.",
        "",
        "| command | epochs x steps | CPU ms / step | validation each epoch (images x S) "
        "| training CPU-h | test images x S | test CPU-h | kernels / step "
        "| GPU ms / step (model) | training GPU-h (model) | test GPU-h (model) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        model = row["gpu_model"]
        lines.append(
            f"| `{row['command']}` | {row['epochs']} x {row['steps'] // row['epochs']} | "
            f"{row['step_ms']:.1f} | {validation_cell(row)} | "
            f"{number_cell(row['training_cpu_hours'])} | {test_work_cell(row)} | "
            f"{number_cell(row['evaluation_cpu_hours'])} | {model['step']['kernels']} | "
            f"{range_cell(model['step_ms'])} | {range_cell(model['training_hours'])} | "
            f"{range_cell(model['evaluation_hours'])} |"
        )
    return "\n".join(lines) + "\n"


README_MARKERS = ("<!-- table:costs -->", "<!-- /table -->")


def readme_table(record: dict[str, Any]) -> str:
    """The README's short form of costs.md: each row's command and hours."""
    lines = [
        "| command | training CPU-h | test CPU-h | GPU-h, training + test (model) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for row in record["rows"].values():
        model = row["gpu_model"]
        gpu = [
            train + test
            for train, test in zip(model["training_hours"], model["evaluation_hours"], strict=True)
        ]
        lines.append(
            f"| `{row['command']}` | {number_cell(row['training_cpu_hours'])} | "
            f"{number_cell(row['evaluation_cpu_hours'])} | {range_cell(gpu)} |"
        )
    return "\n".join(lines)


def with_readme_table(readme: str, record: dict[str, Any]) -> str:
    """The README's text with the table between its markers redrawn from `record`."""
    start, end = README_MARKERS
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{readme_table(record)}\n{end}{tail}"


def write_tables(folder: Path, record: dict[str, Any]) -> None:
    """costs.md in `folder`, and the README's table when the folder is the checkout's."""
    (folder / "costs.md").write_text(markdown(record))
    readme = Path(__file__).resolve().parent.parent / "README.md"
    if folder.resolve() == readme.parent / "results" / "reproduction":
        readme.write_text(with_readme_table(readme.read_text(), record))


def gpu_record(gpu: GpuModel) -> dict[str, Any]:
    """The GPU model as costs.json stores it (tuples become lists)."""
    return json.loads(json.dumps(asdict(gpu)))


def kept_rows(old: dict[str, Any], gpu: GpuModel) -> dict[str, Any]:
    """The rows of a costs.json record a partial measurement keeps: all of them when they were
    priced on this GPU model, none otherwise (they are measured again)."""
    return dict(old.get("rows", {})) if old.get("gpu") == gpu_record(gpu) else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("results/reproduction"))
    parser.add_argument(
        "--rows", nargs="*", default=ROWS, help="measure these rows; the others in costs.json stay"
    )
    parser.add_argument("--render", action="store_true", help="only redraw costs.md")
    parser.add_argument("--note", default="", help="what else ran, e.g. 'the studies paused'")
    args = parser.parse_args()
    path = args.out / "costs.json"
    if args.render:
        write_tables(args.out, json.loads(path.read_text()))
        return
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}; the rows are {ROWS}")
    from vgp_bench.run.host_memory import keep_freed_memory
    from vgp_bench.run.runtime import code_version

    torch.set_num_threads(1)
    malloc = keep_freed_memory()  # as vgp-train runs: the steps' large buffers reused
    gpu = GpuModel()
    old = json.loads(path.read_text()) if path.exists() else {}
    record: dict[str, Any] = {"gpu": gpu_record(gpu), "rows": kept_rows(old, gpu)}
    args.out.mkdir(parents=True, exist_ok=True)
    version = code_version()  # before this run writes its own files into the checkout
    for name in args.rows:
        print(f"{name} ...", flush=True)
        conditions = {
            "measured": time.strftime("%Y-%m-%d %H:%M"),
            "code_version": version,
            "load_average": [round(value, 1) for value in os.getloadavg()],
            "malloc": malloc,
            "note": args.note,
        }
        record["rows"][name] = {**row_cost(name, gpu), **conditions}
        record["rows"] = {row: record["rows"][row] for row in ROWS if row in record["rows"]}
        path.write_text(json.dumps(record, indent=2))
    write_tables(args.out, record)
    print(markdown(record))


if __name__ == "__main__":
    main()
