"""Cholesky factors of kernel matrices, with a diagonal jitter that grows until one succeeds."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from vgp_bench.errors import ConfigError


@dataclass
class JitteredCholesky:
    """L with L L^T = K + jitter I, and what it took to get it."""

    factor: Tensor  # [..., M, M] lower triangular; NaN where even the largest jitter failed
    jitter: Tensor  # [...] the absolute jitter added to the diagonal
    retries: Tensor  # [...] how many times the jitter grew (int64)
    # K itself, without the jitter, where the factor was made without gradients: the
    # conditional's own backward (gp/fused.py) sends the gradient to it
    matrix: Tensor | None = None


def jitter_levels(initial: float, growth: float, maximum: float) -> list[float]:
    """Relative jitters tried in order: initial, initial*growth, ... up to `maximum`."""
    if initial <= 0 or growth <= 1 or maximum < initial:
        raise ConfigError(
            f"need 0 < jitter <= max_jitter and growth > 1, got {initial}, {maximum}, {growth}"
        )
    count = math.floor(math.log(maximum / initial) / math.log(growth) + 1e-9) + 1
    return [initial * growth**level for level in range(count)]


def cholesky_with_jitter(
    matrix: Tensor,
    scale: Tensor | float = 1.0,
    initial_jitter: float = 1e-6,
    growth: float = 10.0,
    max_jitter: float = 1e-2,
    sync_free: bool | None = None,
) -> JitteredCholesky:
    """Cholesky of `matrix` `[..., M, M]` + jitter * scale * I, jitter growing x`growth` on failure.

    `scale` is the kernel variance sigma^2_ard, so jitters are relative to it (its gradient
    is not followed through the jitter). Each matrix of a batch gets its own jitter.

    Two strategies give the same factor: `sync_free=False` retries only on failure, reading
    the failure flag on the host (free on CPU); `sync_free=True` tries every level without
    gradients and picks the first success on the device, so a CUDA step never waits for the
    host. `None` picks the sync-free one on accelerators. When even `max_jitter` fails, the
    sequential strategy raises and the sync-free one returns a NaN factor (a training step
    that skips non-finite losses then skips it).
    """
    levels = jitter_levels(initial_jitter, growth, max_jitter)
    if sync_free is None:
        sync_free = matrix.device.type != "cpu"
    options = {"dtype": matrix.dtype, "device": matrix.device}
    if isinstance(scale, Tensor):
        scale_tensor = scale.detach().to(matrix.dtype)
    else:  # built on the device, not copied from the host (a copy would sync)
        scale_tensor = torch.full((), float(scale), **options)
    level_values = initial_jitter * growth ** torch.arange(len(levels), **options)
    batch_shape = matrix.shape[:-2]
    if sync_free:
        chosen = _first_successful_level(matrix.detach(), level_values * scale_tensor)
    else:
        chosen = torch.zeros(batch_shape, dtype=torch.long, device=matrix.device)
    while True:
        jitter = level_values[chosen] * scale_tensor  # [...]
        factor, info = torch.linalg.cholesky_ex(with_jitter(matrix, jitter))
        failed = info != 0  # [...]
        if sync_free:
            factor = torch.where(failed[..., None, None], torch.nan, factor)
            break
        if not bool(failed.any()):
            break
        if bool((failed & (chosen == len(levels) - 1)).any()):
            raise torch.linalg.LinAlgError(
                f"kernel matrix is not positive definite even with jitter {max_jitter} x "
                f"sigma^2_ard; raise inference.max_jitter or use float64"
            )
        chosen = chosen + failed.long()
    return JitteredCholesky(factor=factor, jitter=jitter, retries=chosen)


def with_jitter(matrix: Tensor, jitter: Tensor) -> Tensor:
    """`matrix` `[..., M, M]` + jitter `[...]` x I: a copy with the jitter added to its diagonal
    only (the numbers of adding jitter x I, without forming I or a second m x m pass)."""
    shifted = matrix.clone()
    shifted.diagonal(dim1=-2, dim2=-1).add_(jitter.unsqueeze(-1))
    return shifted


def _first_successful_level(matrix: Tensor, jitters: Tensor) -> Tensor:
    """Index of the smallest jitter whose Cholesky succeeds, per matrix, without a host sync.

    The largest jitter is not tried: it is the answer whenever no smaller one succeeds.
    """
    last = len(jitters) - 1
    chosen = torch.full(matrix.shape[:-2], last, dtype=torch.long, device=matrix.device)
    with torch.no_grad():
        for level in range(last - 1, -1, -1):  # downwards, so the smallest success wins
            info = torch.linalg.cholesky_ex(with_jitter(matrix, jitters[level])).info
            chosen = torch.where(info == 0, level, chosen)
    return chosen
