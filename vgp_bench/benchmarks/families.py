"""Step time of every variational family of Table 1 on dlgm1, beside the VAE's (`make bench`).

One real `Trainer.training_step` per timed step (batch 100, the paper's dlgm1), each family at
its Table 1 configuration: the VAE, IWAE (k = 50), planar flows (k = 80), HVI (L = 8) and the
VGP (default shared-basis outputs, and the paper's dense ones); any other family of
configs/inference/ at its config's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from vgp_bench.locations import checkout_root, group_options
from vgp_bench.run.config.store import compose_config
from vgp_bench.run.config.typed import trainer_settings

# The rows of the families whose Table 1 settings (or variants) are timed; every other family of
# configs/inference/ is timed at its config's settings after them, with no edit here
TABLE1_ROWS: dict[str, dict[str, list[str]]] = {
    "vae": {
        "vae": ["inference=vae"],
        "iwae (k=50)": ["inference=vae", "trainer.objective=iwae", "trainer.n_samples=50"],
    },
    "planar_flow": {"planar_flow (k=80)": ["inference=planar_flow", "inference.flow_length=80"]},
    "hvi": {"hvi (L=8)": ["inference=hvi", "inference.leapfrog_steps=8"]},
    "vgp": {
        "vgp global (default)": ["inference=vgp"],
        "vgp dense (paper)": [
            "inference=vgp",
            "inference.prior_mean=zero",
            "inference.mean_field_scale=context",
            "inference.outputs=dense",
        ],
    },
}


def family_overrides() -> dict[str, list[str]]:
    """Each timed row's overrides: TABLE1_ROWS, then every other family at its config."""
    rows = {
        name: overrides for family in TABLE1_ROWS.values() for name, overrides in family.items()
    }
    others = [family for family in group_options("inference") if family not in TABLE1_ROWS]
    return rows | {family: [f"inference={family}"] for family in others}


def data_overrides() -> list[str]:
    """Converted MNIST when it is in the repository's data/ (outside a checkout: the current
    folder's), else synthetic images alike."""
    data_dir = (checkout_root() or Path.cwd()) / "data"
    if (data_dir / "mnist.h5").exists():
        return ["dataset=mnist", f"data_dir={data_dir}"]
    return ["dataset=synthetic", "dataset.n_train=2000", "dataset.n_test=100"]


def step_time(overrides: list[str], steps: int, warmup: int = 2) -> dict[str, float]:
    """Milliseconds per training step of dlgm1 with `overrides`, on the CPU, batch 100."""
    from vgp_bench.run.loggers import RunLogger
    from vgp_bench.run.loop.build import build_components
    from vgp_bench.run.loop.trainer import Trainer

    cfg = compose_config([*data_overrides(), "model=dlgm1", "device=cpu", *overrides])
    trainer = Trainer(cfg, Path("bench/scratch"), build_components(cfg))
    trainer.loggers = RunLogger()
    batch = torch.arange(trainer_settings(cfg).batch_size)
    for _ in range(warmup):
        trainer.training_step(batch, with_terms=False)
    started = time.perf_counter()
    for _ in range(steps):
        trainer.training_step(batch, with_terms=False)
    elapsed = time.perf_counter() - started
    return {"ms_per_step": 1000 * elapsed / steps, "steps": steps}


def bench_families(quick: bool) -> dict[str, Any]:
    """Each family's dlgm1 step time and its ratio to the VAE's."""
    steps = 3 if quick else 20
    results: dict[str, Any] = {}
    rows = family_overrides()
    for name, overrides in rows.items():
        results[name] = step_time(overrides, steps)
    base = results["vae"]["ms_per_step"]
    for name in rows:
        results[name]["step_ratio_to_vae"] = results[name]["ms_per_step"] / base
    results["threads"] = torch.get_num_threads()
    return results


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(bench_families("--quick" in sys.argv), indent=2))
