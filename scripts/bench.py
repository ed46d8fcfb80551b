#!/usr/bin/env python
"""`make bench`: training and IS-evaluation throughput of the runner, written as JSON.

Numbers, not tests: each entry says what was measured, on which data and threads.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import time
from pathlib import Path

import torch
from tqdm import tqdm

from vgp_bench.benchmarks import plain_vae
from vgp_bench.evaluate import estimate_split
from vgp_bench.runtime import code_version, make_generator
from vgp_bench.train import NullWriter, Trainer, build_components

REPO = Path(__file__).resolve().parent.parent


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def data_overrides() -> list[str]:
    """Real MNIST when converted, else synthetic images of the same shape."""
    if (REPO / "data" / "mnist.h5").exists():
        return ["dataset=mnist", f"data_dir={REPO / 'data'}"]
    return ["dataset=synthetic", "dataset.n_train=10000", "dataset.n_test=1000"]


def make_trainer(overrides: list[str]) -> Trainer:
    """A Trainer of the real configs on CPU, logging nowhere, checkpointing never."""
    cfg = compose(
        [
            *data_overrides(),
            "device=cpu",
            "trainer.progress=false",
            "trainer.checkpoint_every=1000000",
            *overrides,
        ]
    )
    trainer = Trainer(cfg, REPO / "bench" / "scratch", build_components(cfg))
    trainer.writer = NullWriter()
    return trainer


def runner_training(overrides: list[str], steps: int, warmup: int = 5) -> dict:
    """Examples/s of the real training loop (Trainer.run_epoch), data already in memory."""
    trainer = make_trainer(overrides)
    cfg = trainer.cfg
    with tqdm(disable=True) as bar:
        cfg.trainer.max_steps = warmup
        trainer.run_epoch({}, bar)
        cfg.trainer.max_steps = warmup + steps
        started = time.perf_counter()
        trainer.run_epoch({}, bar)
        elapsed = time.perf_counter() - started
    batch = int(cfg.trainer.batch_size)
    return {
        "examples_per_s": steps * batch / elapsed,
        "ms_per_step": 1000 * elapsed / steps,
        "steps": steps,
        "batch_size": batch,
    }


def runner_is(overrides: list[str], examples: int, samples: int) -> dict:
    """IS samples/s of the evaluator (chunks of samples as single batched passes)."""
    cfg = compose([*data_overrides(), "device=cpu", *overrides])
    parts = build_components(cfg)
    split = parts.data.test.subset(examples)
    started = time.perf_counter()
    estimate_split(
        parts.model,
        parts.heads,
        split,
        samples,
        int(cfg.eval.chunk_size),
        int(cfg.eval.batch_size),
        make_generator(parts.device, 0),
        parts.device,
    )
    elapsed = time.perf_counter() - started
    return {
        "samples_per_s": examples * samples / elapsed,
        "examples": examples,
        "is_samples": samples,
        "chunk_size": int(cfg.eval.chunk_size),
    }


def bench_dlgm1_vae(quick: bool) -> dict:
    steps = 30 if quick else 200
    cfg = compose([*data_overrides(), "device=cpu"])
    parts = build_components(cfg)
    images = parts.data.train.gather(torch.arange(min(len(parts.data.train), 10000))).flatten(1)
    runner = runner_training(["model=dlgm1", "inference=vae"], steps)
    plain = plain_vae.training_examples_per_second(images, steps)
    examples, samples = (20, 200) if quick else (100, 1000)
    runner_eval = runner_is(["model=dlgm1", "inference=vae"], examples, samples)
    naive_eval = plain_vae.naive_is_samples_per_second(images[:examples], samples)
    return {
        "training": {
            "runner": runner,
            "plain_loop_examples_per_s": plain,
            "ratio_runner_to_plain": runner["examples_per_s"] / plain,
            "target": ">= 0.9",
        },
        "is_evaluation": {
            "runner": runner_eval,
            "naive_loop_samples_per_s": naive_eval,
            "ratio_runner_to_naive": runner_eval["samples_per_s"] / naive_eval,
            "target": ">= 2",
        },
    }


def parameter_count(overrides: list[str]) -> dict[str, int]:
    cfg = compose([*data_overrides(), "device=cpu", *overrides])
    parts = build_components(cfg)
    return {
        "model": sum(p.numel() for p in parts.model.parameters()),
        "heads": sum(p.numel() for p in parts.heads.parameters()),
    }


VGP_VARIANTS = {
    "shared_basis": ["inference.outputs=shared_basis"],
    "low_rank": ["inference.outputs=low_rank"],
    "dense (paper)": ["inference.outputs=dense"],
}


def bench_vgp(quick: bool) -> dict:
    """VGP vs VAE training step on the same model (batch 100, m = 500, c = d) and IS speed."""
    steps = 10 if quick else 50
    results: dict = {}
    for model in ("dlgm1", "dlgm2"):
        vae = runner_training([f"model={model}", "inference=vae"], steps)
        entry: dict = {
            "vae": vae,
            "vae_parameters": parameter_count([f"model={model}", "inference=vae"]),
        }
        for variant, extra in VGP_VARIANTS.items():
            overrides = [f"model={model}", "inference=vgp", *extra]
            run = runner_training(overrides, steps)
            entry[f"vgp {variant}"] = {
                **run,
                "step_ratio_to_vae": run["ms_per_step"] / vae["ms_per_step"],
                "parameters": parameter_count(overrides),
            }
        examples, samples = (10, 100) if quick else (20, 1000)
        entry["is_evaluation"] = {
            "vae": runner_is([f"model={model}", "inference=vae"], examples, samples),
            "vgp shared_basis": runner_is([f"model={model}", "inference=vgp"], examples, samples),
        }
        entry["target"] = "vgp step <= 2x vae step at m = 500"
        results[model] = entry
    return results


def bench_draw(quick: bool) -> dict:
    """DRAW step time (batch 100, T = 64, default sizes) with each head, and the dominant cost."""
    steps = 2 if quick else 5
    results: dict = {}
    variants = {
        "vae": ["inference=vae"],
        "vgp (default: shared_basis)": ["inference=vgp"],
        "vgp dense (paper)": ["inference=vgp", "inference.outputs=dense"],
    }
    for name, overrides in variants.items():
        results[name] = runner_training(["model=draw", *overrides], steps, warmup=1)
    base = results["vae"]["ms_per_step"]
    for name in variants:
        results[name]["step_ratio_to_vae"] = results[name]["ms_per_step"] / base
    results["dominant_cost"] = profile_draw_step()
    results["target"] = "draw+vgp (default) step <= 2x draw+vae"
    return results


def profile_draw_step(top: int = 6) -> dict[str, list]:
    """The operators taking most CPU time in one DRAW training step, per head."""
    from torch.profiler import profile

    table: dict[str, list] = {}
    for name in ("vae", "vgp"):
        trainer = make_trainer(["model=draw", f"inference={name}"])
        trainer.training_step(torch.arange(100))
        with profile() as profiler:
            trainer.training_step(torch.arange(100))
        events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[
            :top
        ]
        total = sum(e.self_cpu_time_total for e in profiler.key_averages())
        table[name] = [[e.key, round(100 * e.self_cpu_time_total / total, 1)] for e in events]
    return table


# Further benchmarks register here as (name, "module:function"); each takes quick: bool.
EXTRA_BENCHMARKS: list[tuple[str, str]] = [
    ("families", "vgp_bench.benchmarks.families:bench_families"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench/results.json")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke check)")
    parser.add_argument("--only", nargs="*", help="run only these benchmarks")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "cuda": torch.cuda.is_available(),
        },
        "code_version": code_version(),
        "data": data_overrides()[0],
    }
    benchmarks = [("dlgm1_vae", bench_dlgm1_vae), ("vgp", bench_vgp), ("draw", bench_draw)]
    for name, target in EXTRA_BENCHMARKS:
        module_name, function_name = target.split(":")
        benchmarks.append((name, getattr(importlib.import_module(module_name), function_name)))
    for name, function in benchmarks:
        if args.only and name not in args.only:
            continue
        print(f"bench {name} ...", flush=True)
        results[name] = function(args.quick)
        print(json.dumps(results[name], indent=2), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
