"""The optimizers' update alone (`make bench`): the runner's choice against the alternative on
the parameters of the rows the studies train, interleaved blocks, one thread.

Rows: the runner's RMSprop (small tensors all at once, large ones in blocks) against torch's
tensor by tensor, on dlgm1's VAE, the calibrated study's VGP and DRAW's VAE; Burda's Adam and
torch's Adam with `foreach` on and off, on the calibrated study's VAE and VGP. The gradients are
fixed and seeded; every pair computes the same numbers (tests/test_rmsprop.py, test_train.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vgp_bench.benchmarks.overhead import make_trainer
from vgp_bench.optimizers import BurdaAdam, RMSprop

RMSPROP_ROWS = {
    "dlgm1 vae": ["model=dlgm1", "inference=vae", "trainer.batch_size=20"],
    "burda_dlgm1_vgp": ["model=dlgm1", "experiment=burda_dlgm1_vgp"],
    "draw vae": ["model=draw", "inference=vae"],
}
ADAM_ROWS = {
    "burda_dlgm1_vae": ["model=dlgm1", "experiment=burda_dlgm1_vae"],
    "burda_dlgm1_vgp": ["model=dlgm1", "experiment=burda_dlgm1_vgp"],
}
SETTINGS = {"lr": 1e-4}  # the update's cost does not depend on the values


def seeded_parameters(overrides: list[str], data: list[str] | None = None) -> list[nn.Parameter]:
    """The row's parameters, each with a fixed seeded gradient (`data`: dataset overrides)."""
    parameters = list(make_trainer(overrides, data=data).parts.parameters)
    generator = torch.Generator().manual_seed(0)
    for parameter in parameters:
        parameter.grad = 1e-3 * torch.randn(parameter.shape, generator=generator)
    return parameters


def milliseconds_per_update(
    optimizers: dict[str, torch.optim.Optimizer], rounds: int, block: int
) -> dict[str, float]:
    """Median ms an update of each optimizer, their blocks of `block` updates alternating."""
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(rounds):
        for name, optimizer in optimizers.items():
            started = time.perf_counter()
            for _ in range(block):
                optimizer.step()
            times[name].append(1000 * (time.perf_counter() - started) / block)
    return {name: round(statistics.median(values), 4) for name, values in times.items()}


def compare(
    overrides: list[str],
    makers: dict[str, Callable[[list[nn.Parameter]], Any]],
    quick: bool,
    data: list[str] | None = None,
) -> dict[str, Any]:
    """One row: its tensors and entries, and each optimizer's ms an update."""
    parameters = seeded_parameters(overrides, data)
    rounds, block = (3, 5) if quick else (15, 50)
    optimizers = {name: make(parameters) for name, make in makers.items()}
    return {
        "tensors": len(parameters),
        "entries": sum(parameter.numel() for parameter in parameters),
        "ms_per_update": milliseconds_per_update(optimizers, rounds, block),
    }


def bench_optimizer_update(quick: bool) -> dict[str, Any]:
    """Each row's update under the runner's choice and under the alternative."""
    rmsprop = {
        "runner's RMSprop": lambda p: RMSprop(p, alpha=0.95, eps=1e-6, foreach=False, **SETTINGS),
        "torch's RMSprop, tensor by tensor": lambda p: torch.optim.RMSprop(
            p, alpha=0.95, eps=1e-6, foreach=False, **SETTINGS
        ),
    }
    adam = {
        "Burda's Adam, foreach": lambda p: BurdaAdam(
            p, gradient_scale=20.0, foreach=True, **SETTINGS
        ),
        "Burda's Adam, tensor by tensor": lambda p: BurdaAdam(
            p, gradient_scale=20.0, foreach=False, **SETTINGS
        ),
        "torch's Adam, foreach": lambda p: torch.optim.Adam(p, foreach=True, **SETTINGS),
        "torch's Adam, tensor by tensor": lambda p: torch.optim.Adam(p, foreach=False, **SETTINGS),
    }
    results: dict[str, Any] = {"threads": torch.get_num_threads(), "rmsprop": {}, "adam": {}}
    for name, overrides in RMSPROP_ROWS.items():
        results["rmsprop"][name] = compare(overrides, rmsprop, quick)
    for name, overrides in ADAM_ROWS.items():
        results["adam"][name] = compare(overrides, adam, quick)
    return results
