"""Estimators: pure functions of log importance weights `[S, B]`; they never see a head."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


def bound(log_weights: Tensor) -> Tensor:
    """The Monte Carlo lower bound E_q[log p(x, z) - log q~(z)] per data point, `[B]`."""
    return log_weights.mean(0)


def importance_weighted_log_likelihood(log_weights: Tensor) -> Tensor:
    """log (1/S) sum_s w_s per data point, `[B]`: a stochastic lower bound, consistent in S."""
    return torch.logsumexp(log_weights, dim=0) - math.log(log_weights.shape[0])


TRAINING_BOUNDS: dict[str, Callable[[Tensor], Tensor]] = {
    "elbo": bound,  # the mean of the S single-sample bounds
    "iwae": importance_weighted_log_likelihood,  # Burda et al. (2016), Eq. 8, k = S
}


def training_bound(objective: str) -> Callable[[Tensor], Tensor]:
    """The per-example training bound `[S, B] -> [B]` named by `trainer.objective`.

    `iwae` is log (1/k) sum_k w_k over the k = S samples of an example: a lower bound on
    log p(x) for any head whose weight has E[w] <= p(x), tighter as k grows, and equal to
    `elbo` at k = 1.
    """
    if objective not in TRAINING_BOUNDS:
        raise ValueError(
            f"trainer.objective must be one of {', '.join(TRAINING_BOUNDS)}, got {objective!r} "
            "(the number of samples k is trainer.n_samples)"
        )
    return TRAINING_BOUNDS[objective]


@dataclass
class ChunkedEstimate:
    """Per-example IS log-likelihood and bound from `n_samples` weights drawn in chunks."""

    log_likelihood: Tensor  # [B]
    bound: Tensor  # [B]
    n_samples: int


def chunked_estimate(
    draw_log_weights: Callable[[int], Tensor], n_samples: int, chunk_size: int
) -> ChunkedEstimate:
    """Stream `n_samples` log weights in chunks of at most `chunk_size` (memory stays bounded).

    `draw_log_weights(k)` returns `[k, B]`. The running logsumexp is exact in any chunking.
    """
    if n_samples < 1 or chunk_size < 1:
        raise ValueError(f"n_samples and chunk_size must be >= 1, got {n_samples}, {chunk_size}")
    running_logsumexp: Tensor | None = None
    running_sum: Tensor | None = None
    remaining = n_samples
    while remaining > 0:
        count = min(chunk_size, remaining)
        log_weights = draw_log_weights(count).detach()  # [k, B]
        chunk_logsumexp = torch.logsumexp(log_weights.double(), dim=0)
        chunk_sum = log_weights.double().sum(0)
        if running_logsumexp is None or running_sum is None:
            running_logsumexp, running_sum = chunk_logsumexp, chunk_sum
        else:
            running_logsumexp = torch.logaddexp(running_logsumexp, chunk_logsumexp)
            running_sum = running_sum + chunk_sum
        remaining -= count
    assert running_logsumexp is not None and running_sum is not None
    return ChunkedEstimate(
        log_likelihood=(running_logsumexp - math.log(n_samples)).float(),
        bound=(running_sum / n_samples).float(),
        n_samples=n_samples,
    )
