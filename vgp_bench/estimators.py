"""Estimators: pure functions of log importance weights `[S, B]`; they never see a head."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vgp_bench.errors import ConfigError


def bound(log_weights: Tensor) -> Tensor:
    """The Monte Carlo lower bound E_q[log p(x, z) - log q~(z)] per data point, `[B]`."""
    return log_weights.mean(0)


def importance_weighted_log_likelihood(log_weights: Tensor) -> Tensor:
    """log (1/S) sum_s w_s per data point, `[B]`: a stochastic lower bound, consistent in S."""
    return torch.logsumexp(log_weights, dim=0) - math.log(log_weights.shape[0])


def pareto_tail_size(n_samples: int) -> int:
    """How many of the largest weights PSIS fits its tail to: min(S / 5, 3 sqrt(S))."""
    return min(n_samples // 5, int(3.0 * math.sqrt(n_samples)))


def generalized_pareto_shape(exceedances: Tensor) -> Tensor:
    """Shape k of a generalized Pareto fitted to `[n, B]` positive exceedances, `[B]`.

    The empirical-Bayes estimate of Zhang & Stephens (2009) with the weakly informative prior
    on k of Vehtari et al. (PSIS, 2015-2024): n k shrunk towards 0.5 with weight 10.
    """
    x = exceedances.double().sort(dim=0).values  # [n, B], ascending
    n = x.shape[0]
    grid = 30 + int(math.sqrt(n))
    index = torch.arange(1, grid + 1, dtype=x.dtype, device=x.device)
    quartile = x[max(int(n / 4 + 0.5) - 1, 0)]  # [B]
    theta = (1.0 - torch.sqrt(grid / (index - 0.5))).unsqueeze(-1) / (3.0 * quartile) + 1.0 / x[-1]
    # profile log-likelihood of each theta on the grid, [grid, B]
    k_of_theta = torch.log1p(-theta.unsqueeze(1) * x.unsqueeze(0)).mean(1)
    profile = n * (torch.log(-theta / k_of_theta) - k_of_theta - 1.0)
    posterior_theta = (torch.softmax(profile, dim=0) * theta).sum(0)  # [B]
    k = torch.log1p(-posterior_theta * x).mean(0)
    return (n * k + 10.0 * 0.5) / (n + 10.0)


def pareto_k_hat(log_weights: Tensor, n_samples: int | None = None) -> Tensor:
    """PSIS reliability k-hat of the importance weights of each example, `[S, B]` -> `[B]`.

    `n_samples` (default S) is the size of the whole sample when `log_weights` holds only its
    largest M + 1 values per example (the streaming evaluation keeps just those).
    Fits a generalized Pareto to the largest weights: k-hat < 0.5 the estimate is reliable,
    0.5-0.7 usable, > 0.7 the weights have (nearly) infinite variance and the IS estimate
    converges too slowly to trust (Vehtari et al.; Yao et al. 2018 for variational inference).
    NaN when S is too small (< 25 samples) or the tail is flat (identical weights).
    """
    tail = pareto_tail_size(log_weights.shape[0] if n_samples is None else n_samples)
    if tail < 5 or log_weights.shape[0] < tail + 1:
        return torch.full(log_weights.shape[1:], math.nan, dtype=torch.float64)
    top = torch.topk(log_weights.double(), tail + 1, dim=0).values  # [M + 1, B], descending
    largest = top[0]
    exceedances = torch.exp(top[:-1] - largest) - torch.exp(top[-1] - largest)  # [M, B]
    flat = exceedances[0] <= 0
    k_hat = generalized_pareto_shape(exceedances.clamp_min(torch.finfo(torch.float64).tiny))
    return torch.where(flat, torch.full_like(k_hat, math.nan), k_hat)


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
        raise ConfigError(
            f"trainer.objective must be one of {', '.join(TRAINING_BOUNDS)}, got {objective!r} "
            "(the number of samples k is trainer.n_samples)"
        )
    return TRAINING_BOUNDS[objective]


@dataclass
class ChunkedEstimate:
    """Per-example IS log-likelihood, bound and PSIS k-hat from `n_samples` weights in chunks."""

    log_likelihood: Tensor  # [B]
    bound: Tensor  # [B]
    n_samples: int
    pareto_k: Tensor | None = None  # [B], float64


def chunked_estimate(
    draw_log_weights: Callable[[int], Tensor], n_samples: int, chunk_size: int
) -> ChunkedEstimate:
    """Stream `n_samples` log weights in chunks of at most `chunk_size` (memory stays bounded).

    `draw_log_weights(k)` returns `[k, B]`. The running logsumexp is exact in any chunking,
    and so is the PSIS k-hat: only the largest M + 1 weights of each example are kept.
    """
    if n_samples < 1 or chunk_size < 1:
        raise ValueError(f"n_samples and chunk_size must be >= 1, got {n_samples}, {chunk_size}")
    running_logsumexp: Tensor | None = None
    running_sum: Tensor | None = None
    tail: Tensor | None = None  # the largest log weights so far, [<= M + 1, B]
    keep = pareto_tail_size(n_samples) + 1
    remaining = n_samples
    while remaining > 0:
        count = min(chunk_size, remaining)
        log_weights = draw_log_weights(count).detach().double()  # [k, B]
        chunk_logsumexp = torch.logsumexp(log_weights, dim=0)
        chunk_sum = log_weights.sum(0)
        if running_logsumexp is None or running_sum is None:
            running_logsumexp, running_sum = chunk_logsumexp, chunk_sum
        else:
            running_logsumexp = torch.logaddexp(running_logsumexp, chunk_logsumexp)
            running_sum = running_sum + chunk_sum
        candidates = log_weights if tail is None else torch.cat([tail, log_weights])
        tail = torch.topk(candidates, min(keep, candidates.shape[0]), dim=0).values
        remaining -= count
    assert running_logsumexp is not None and running_sum is not None and tail is not None
    return ChunkedEstimate(
        log_likelihood=(running_logsumexp - math.log(n_samples)).float(),
        bound=(running_sum / n_samples).float(),
        n_samples=n_samples,
        pareto_k=pareto_k_hat(tail, n_samples),
    )
