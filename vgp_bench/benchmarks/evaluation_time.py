"""What the IS evaluation of each study row costs (`make bench`): S = 5000 samples for each of
the 10,000 test images, estimated from a timed subset of images.

Each row is built from its real configuration with untrained parameters (the time of an
evaluation does not depend on the values, only on the shapes) and evaluated by the runner's own
`estimate_split` on one eval batch of the test split (the configuration's eval batch and chunk
sizes) with fewer samples; the time is scaled by samples and batches to the whole split (the
per-batch preparation is then counted once per timed chunk group, a slight overestimate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from vgp_bench.benchmarks.families import data_overrides
from vgp_bench.run.config.store import compose_config
from vgp_bench.run.config.typed import eval_settings
from vgp_bench.run.process.runtime import make_generator

TEST_IMAGES = 10_000
TABLE_SAMPLES = 5000
# study row -> (overrides, samples timed on one eval batch): the convergence and DRAW rows
ROWS: dict[str, tuple[list[str], int]] = {
    "dlgm1 vae": (["model=dlgm1", "inference=vae"], 1000),
    "dlgm1 vgp default": (["model=dlgm1", "inference=vgp"], 1000),
    "dlgm1 vgp paper": (["experiment=table1_dlgm1_vgp"], 1000),
    "dlgm2 vae": (["model=dlgm2", "inference=vae"], 1000),
    "dlgm2 vgp default": (["model=dlgm2", "inference=vgp"], 1000),
    "dlgm2 vgp paper": (["experiment=table1_dlgm2_vgp"], 1000),
    "draw vae": (["model=draw", "inference=vae"], 100),
    "draw vgp default": (["model=draw", "inference=vgp"], 100),
}


def evaluation_run(
    overrides: list[str],
    samples: int,
    data: list[str] | None = None,
    split_name: str = "test",
    images: int | None = None,
) -> tuple[Callable[[], Any], dict[str, int]]:
    """The runner's IS evaluation of the first `images` (one eval batch) of a split with
    `samples` samples each (CPU), ready to run, and its sizes (`data`: the dataset overrides,
    by default converted MNIST when present)."""
    from vgp_bench.run.loop.build import build_components
    from vgp_bench.run.loop.evaluate import estimate_split

    cfg = compose_config([*(data_overrides() if data is None else data), "device=cpu", *overrides])
    parts = build_components(cfg)
    settings = eval_settings(cfg)
    chunk_size, batch_size = settings.chunk_size, settings.batch_size
    split = getattr(parts.data, split_name).subset(images or batch_size)

    def run() -> Any:
        return estimate_split(
            parts.model,
            parts.heads,
            split,
            samples,
            chunk_size,
            batch_size,
            make_generator(parts.device, 0),
            parts.device,
        )

    sizes = {
        "images_timed": len(split),
        "samples": samples,
        "chunk_size": chunk_size,
        "batch_size": batch_size,
    }
    return run, sizes


def evaluation_seconds(
    overrides: list[str], samples: int, data: list[str] | None = None
) -> dict[str, Any]:
    """Seconds of the runner's IS evaluation of the first eval batch of the test split with
    `samples` samples each (CPU)."""
    run, sizes = evaluation_run(overrides, samples, data)
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    return {**sizes, "seconds": round(seconds, 3)}


def bench_evaluation_time(quick: bool) -> dict[str, Any]:
    """Each study row's estimated evaluation time on the whole test split, in CPU-hours."""
    results: dict[str, Any] = {
        "what": (
            f"IS evaluation of {TEST_IMAGES} test images x S = {TABLE_SAMPLES}, estimated from one "
            "eval batch of the test split and fewer samples (untrained parameters); one process, "
            f"{torch.get_num_threads()} thread(s)"
        ),
        "rows": {},
    }
    for name, (overrides, samples) in ROWS.items():
        timed = evaluation_seconds(overrides, 100 if quick else samples)
        scale = (TEST_IMAGES / timed["images_timed"]) * (TABLE_SAMPLES / timed["samples"])
        timed["estimated_hours"] = round(timed["seconds"] * scale / 3600, 3)
        results["rows"][name] = timed
        print(f"    {name}: {timed['estimated_hours']:.2f} h", flush=True)
    return results


if __name__ == "__main__":
    import json
    import sys

    torch.set_num_threads(1)
    print(json.dumps(bench_evaluation_time("--quick" in sys.argv), indent=2))
