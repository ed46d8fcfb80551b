"""`make bench`'s steps section: each training step's median time against its floor, measured
in the same run on the same threads (the step's matmuls, Cholesky factorizations and triangular
solves, forward and backward, replayed alone, plus one optimizer update), with its FLOPs and
achieved GFLOP/s beside the machine's."""

from __future__ import annotations

import argparse
import json
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vgp_bench.benchmarks import floors, overhead, vgp_step
from vgp_bench.run.loop.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]  # the checkout: its data/mnist.h5 when converted
TINY_SIZES = False  # set by --tiny

# model x inference configurations whose step is measured against its floor
# the paper's form of the VGP: zero prior mean, sigma from the features, dense T(h)
PAPER_VGP = [
    "inference=vgp",
    "inference.prior_mean=zero",
    "inference.mean_field_scale=context",
    "inference.outputs=dense",
]
CONFIGS: dict[str, list[str]] = {
    "dlgm1 vae": ["model=dlgm1", "inference=vae"],
    "dlgm1 vgp global (default)": ["model=dlgm1", "inference=vgp"],
    "dlgm1 vgp shared_basis": ["model=dlgm1", "inference=vgp", "inference.outputs=shared_basis"],
    "dlgm1 vgp low_rank": ["model=dlgm1", "inference=vgp", "inference.outputs=low_rank"],
    "dlgm1 vgp dense (paper)": ["model=dlgm1", *PAPER_VGP],
    "dlgm2 vae": ["model=dlgm2", "inference=vae"],
    "dlgm2 vgp global (default)": ["model=dlgm2", "inference=vgp"],
    "dlgm2 vgp dense (paper)": ["model=dlgm2", *PAPER_VGP],
    "draw vae": ["model=draw", "inference=vae"],
    "draw vgp global (default)": ["model=draw", "inference=vgp"],
    "draw vgp dense (paper)": ["model=draw", *PAPER_VGP],
    # the calibrated-protocol study's rows at batch 20 (real MNIST only; vgp_step.py has them)
    "burda vae": vgp_step.BURDA_VAE,
    "burda vgp": vgp_step.BURDA_VGP,
    "burda vgp control": vgp_step.BURDA_CONTROL,
}
# tiny sizes for a CPU smoke run (scripts/gpu_check.py --cpu-smoke): plumbing, not speed
TINY_DATA = ["dataset=synthetic", "dataset.n_train=400", "dataset.n_test=100"]
TINY_MODEL = {
    "dlgm1": ["model.latent_dims=[4]", "model.hidden_dims=[[32]]"],
    "dlgm2": ["model.latent_dims=[4,3]", "model.hidden_dims=[[32],[16]]"],
    "draw": ["model.steps=3", "model.encoder_size=32", "model.decoder_size=32", "model.z_dim=4"],
}


def tiny(overrides: list[str]) -> list[str]:
    """`overrides` at tiny sizes: batch 20, small nets, m = 16."""
    model = next(o.split("=", 1)[1] for o in overrides if o.startswith("model="))
    vgp = ["inference.variational_data_size=16"] if "inference=vgp" in overrides else []
    return [*overrides, *TINY_MODEL[model], *vgp, "trainer.batch_size=20"]


VARIANTS = {"fp32": [], "bf16": ["trainer.precision=bf16"], "compile": ["trainer.compile=true"]}
TARGETS = {
    "is_evaluation_vs_naive": 2.0,
    "step_over_floor": 1.25,
    "draw_step_over_floor": 1.5,
    # hours of the dlgm2 paper-form VGP's S = 5000 evaluation of the 10,000 test images: half
    # of the 54 minutes it took in round three's first session (beside a training)
    "dlgm2_vgp_paper_evaluation_hours": 0.45,
}


def data_overrides() -> list[str]:
    """Real MNIST when converted, else synthetic images of the same shape (tiny: TINY_DATA)."""
    if TINY_SIZES:
        return TINY_DATA
    if (REPO / "data" / "mnist.h5").exists():
        return ["dataset=mnist", f"data_dir={REPO / 'data'}"]
    return ["dataset=synthetic", "dataset.n_train=10000", "dataset.n_test=1000"]


def make_trainer(overrides: list[str], device: str = "cpu") -> Trainer:
    """overhead.make_trainer on the bench's data (tiny sizes with --tiny)."""
    return overhead.make_trainer(overrides, device, data_overrides())


run_steps = overhead.run_steps


def one_step(trainer: Trainer) -> Callable[[], Any]:
    """One training step on the first batch of the epoch (no logging terms)."""
    indices = torch.arange(trainer.trainer_cfg.batch_size)
    return lambda: trainer.training_step(indices, with_terms=False)


def spread(values: list[float]) -> dict[str, float]:
    """Median and quartiles, for numbers measured on a shared machine."""
    if len(values) < 2:
        return {"median": values[0], "low": values[0], "high": values[0]}
    quartiles = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "low": quartiles[0], "high": quartiles[2]}


# -- steps against their floors ----------------------------------------------------------------
def floor_of(trainer: Trainer, device: torch.device) -> tuple[list, float, Callable[[], float]]:
    """(recorded linear algebra, FLOPs of a step, a function timing one floor measurement)."""
    step = one_step(trainer)
    step()  # caches warm, lazy state built
    calls = floors.record_linear_algebra(step)
    flops = floors.count_flops(step)

    def measure() -> float:
        linear_algebra = floors.replay_seconds(calls, device, repeats=1)[0]
        update = floors.update_seconds(trainer.parts.optimizer, device, repeats=1)[0]
        return linear_algebra + update

    return calls, flops, measure


def gp_components(trainer: Trainer, device: torch.device, repeats: int) -> dict[str, float]:
    """The VGP's floor pieces: Cholesky + two solves (forward and backward) at the
    batch's query count, and for dense T(h) the T layer's matmuls, per step."""
    head = trainer.parts.heads["z"]
    if not hasattr(head, "data_size") or not head.parts.warp.uses_gp:  # no GP: warp=linear
        return {}
    batch = trainer.trainer_cfg.batch_size * trainer.trainer_cfg.n_samples
    calls_per_step = int(getattr(trainer.parts.model, "steps", 1))
    core = floors.gp_core(head.data_size, head.latent_input_dim, batch, device)
    gp_ms = floors.median_ms(floors.seconds_per_call(core, repeats, device))
    # DRAW: one Cholesky per minibatch (cached), one pair of solves per step
    solves = floors.solves_only(head.data_size, batch, device)
    solves_ms = floors.median_ms(floors.seconds_per_call(solves, repeats, device))
    result = {
        "gp_core_ms": gp_ms + (calls_per_step - 1) * solves_ms,
        "gp_core_what": f"m={head.data_size}: 1 Cholesky fwd+bwd, {calls_per_step} x 2 "
        f"triangular solves fwd+bwd at {batch} query columns",
    }
    if head.outputs_mode == "dense":
        layer = head.output_net
        t_layer = floors.linear_layer(layer.in_features, layer.out_features, batch, device)
        t_ms = floors.median_ms(floors.seconds_per_call(t_layer, repeats, device))
        result["t_layer_ms"] = calls_per_step * t_ms
        result["t_layer_what"] = (
            f"{calls_per_step} x Linear({layer.in_features} -> {layer.out_features}) fwd+bwd "
            f"at batch {batch}"
        )
    return result


def profile_gap(trainer: Trainer, top: int = 6) -> list[list]:
    """The operators outside linear algebra taking most time in one step: [name, ms]."""
    from torch.profiler import profile

    step = one_step(trainer)
    step()
    with profile() as profiler:
        step()
    linear_algebra = ("mm", "addmm", "bmm", "baddbmm", "cholesky", "solve_triangular", "matmul")
    rows = []
    for event in profiler.key_averages():
        name = event.key.removeprefix("aten::")
        if any(name == op or name.startswith(f"linalg_{op}") for op in linear_algebra):
            continue
        rows.append([event.key, round(event.self_cpu_time_total / 1000, 2)])
    rows.sort(key=lambda row: row[1], reverse=True)
    return rows[:top]


def step_entry(
    name: str,
    overrides: list[str],
    device_name: str,
    blocks: int,
    block_steps: int,
    machine_gflops: float,
    with_floor: bool = True,
) -> dict[str, Any]:
    """A configuration's step time against its floor (interleaved blocks)."""
    device = torch.device(device_name)
    print(f"  {name} ...", flush=True)
    trainer = make_trainer(overrides, device_name)
    compiled = trainer.trainer_cfg.compile
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_steps(trainer, max(2, block_steps // 2))  # warm-up (and compilation)
    fallback = [str(w.message) for w in caught if "trainer.compile" in str(w.message)]
    floor_trainer = make_trainer([*overrides, "trainer.compile=false"], device_name)
    if with_floor:
        calls, flops, measure_floor = floor_of(floor_trainer, device)
    step_times, floor_times = [], []
    for _ in range(blocks):
        step_times.append(run_steps(trainer, block_steps))
        if with_floor:
            floor_times.append(measure_floor())
    step_ms = 1000 * statistics.median(step_times)
    entry: dict[str, Any] = {
        "overrides": overrides,
        "step_ms": round(step_ms, 3),
        "step_ms_spread": {k: round(1000 * v, 3) for k, v in spread(step_times).items()},
        "steps_timed": blocks * block_steps,
        "batch_size": trainer.trainer_cfg.batch_size,
    }
    if compiled:
        entry["compile_mode"] = trainer.trainer_cfg.compile_mode
        entry["graphed_steps"] = trainer.graphed_steps
        entry["compile_fallback"] = fallback
    if with_floor:
        floor_ms = 1000 * statistics.median(floor_times)
        entry |= {
            "floor_ms": round(floor_ms, 3),
            "floor_what": f"{len(calls)} matmuls/factorizations/solves replayed + 1 update",
            "over_floor": round((step_ms - floor_ms) / floor_ms, 3),
            "step_over_floor": round(step_ms / floor_ms, 3),
            "gflop_per_step": round(flops / 1e9, 4),
            "achieved_gflops": round(flops / step_ms / 1e6, 2),
            "machine_matmul_gflops": round(machine_gflops, 1),
        }
        entry |= {
            key: round(value, 3) if isinstance(value, float) else value
            for key, value in gp_components(floor_trainer, device, max(3, blocks)).items()
        }
    return entry


def bench_steps(args: argparse.Namespace, machine_gflops: float) -> dict[str, Any]:
    names = args.configs or [
        name
        for name in CONFIGS
        if not (args.quick and args.device == "cpu" and name == "draw vgp dense (paper)")
        and not (name.startswith("burda") and data_overrides()[0] != "dataset=mnist")
    ]
    variants = args.variants or ["fp32"]
    steps: dict[str, Any] = {}
    for name in names:
        overrides = list(CONFIGS[name])
        is_draw = overrides[0] == "model=draw"
        if args.tiny:
            overrides = tiny(overrides)
        if is_draw:
            blocks, block_steps = (2, 1) if args.quick else (3, 2)
        else:
            blocks, block_steps = (3, 5) if args.quick else (7, 15)
        if "dense" in name and is_draw:
            blocks, block_steps = 2, 1
        for variant in variants:
            key = name if variant == "fp32" and len(variants) == 1 else f"{name} {variant}"
            entry = step_entry(
                key,
                [*overrides, *VARIANTS[variant]],
                args.device,
                blocks,
                block_steps,
                machine_gflops,
                with_floor=variant == "fp32" and not args.no_floors,
            )
            steps[key] = entry
        base = f"{name.split()[0]} vae"
        if base in steps and "step_ms" in steps.get(name, {}) and name != base:
            steps[name]["step_ratio_to_vae"] = round(
                steps[name]["step_ms"] / steps[base]["step_ms"], 3
            )
        if (
            args.device == "cpu"
            and name in steps
            and steps[name].get("step_over_floor", 0) > TARGETS["step_over_floor"]
            and not args.tiny
            and not (is_draw and "dense" in name)
        ):
            steps[name]["gap_profile"] = profile_gap(make_trainer(overrides, args.device))
        write(args.out, {**args.partial, "steps": steps})
    return steps


def write(path: str, results: dict[str, Any]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
