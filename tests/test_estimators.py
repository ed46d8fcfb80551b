"""Estimators on a linear-Gaussian model whose log p(x) is known in closed form."""

from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import varied_seed
from tests.linear_gaussian import LinearGaussianModel
from vgp_bench.estimators import (
    bound,
    chunked_estimate,
    generalized_pareto_shape,
    importance_weighted_log_likelihood,
    pareto_k_hat,
)
from vgp_bench.inference.base import build_heads
from vgp_bench.inference.mean_field import MeanFieldHead


def make_problem(fit_steps: int = 0):
    """The model, a mean-field head (optionally fitted briefly by the bound) and data `[8, ...]`."""
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(MeanFieldHead, model.sites)
    x = model.sample_data(8, seed=3)
    optimizer = torch.optim.Adam(heads.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(5)
    for _ in range(fit_steps):
        optimizer.zero_grad()
        (-model(x, heads, 16, generator).log_weights.mean()).backward()
        optimizer.step()
    return model, heads, x


def test_bound_and_iwae_formulas() -> None:
    log_weights = torch.tensor([[0.0, -1.0], [math.log(3.0), -1.0]])  # [S=2, B=2]
    torch.testing.assert_close(bound(log_weights), torch.tensor([math.log(3.0) / 2, -1.0]))
    torch.testing.assert_close(
        importance_weighted_log_likelihood(log_weights), torch.tensor([math.log(2.0), -1.0])
    )


def test_importance_sampling_equals_bound_at_one_sample() -> None:
    model, heads, x = make_problem()
    log_weights = model(x, heads, 1, torch.Generator().manual_seed(1)).log_weights  # [1, B]
    # logsumexp of one value is that value (m + log 1), and so is the mean of one: exactly
    torch.testing.assert_close(
        importance_weighted_log_likelihood(log_weights), bound(log_weights), rtol=0, atol=0
    )


def test_chunking_does_not_change_the_estimate() -> None:
    """The streamed estimate is accumulated in float64 and rounded to float32; so is the
    reference here. Their float64 values differ by a few eps64 (reassociated sums), far below
    float32's, so the rounded values are equal or, across a rounding boundary, one ulp apart."""
    generator = torch.Generator().manual_seed(varied_seed(0))
    log_weights = torch.randn(100, 5, generator=generator) * 3
    chunks = iter(log_weights.split(7))
    estimate = chunked_estimate(lambda count: next(chunks)[:count], 100, 7)
    one_ulp = torch.finfo(torch.float32).eps
    reference = log_weights.double()
    torch.testing.assert_close(
        estimate.log_likelihood,
        importance_weighted_log_likelihood(reference).float(),
        rtol=one_ulp,
        atol=0,
    )
    torch.testing.assert_close(estimate.bound, bound(reference).float(), rtol=one_ulp, atol=0)


def test_importance_sampling_converges_to_exact_log_likelihood() -> None:
    model, heads, x = make_problem(fit_steps=20)
    exact = model.log_marginal(x).float()  # [B]
    generator = torch.Generator().manual_seed(2)
    gaps = []
    with torch.no_grad():
        for samples in (1, 4, 64, 4096):
            repeats = max(1, 16_384 // samples)
            log_weights = model(x, heads, repeats * samples, generator).log_weights
            per_repeat = log_weights.reshape(repeats, samples, -1)  # [R, K, B]
            estimate = torch.logsumexp(per_repeat, dim=1) - math.log(samples)  # [R, B]
            gaps.append(float((exact - estimate.mean(0)).mean()))
    # E[log-likelihood gap] shrinks monotonically in K (Burda et al. 2016) towards 0
    assert gaps[0] > 1.0
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3] > -0.01
    assert gaps[3] < 0.05


def generalized_pareto_sample(shape: float, count: int, columns: int, seed: int) -> torch.Tensor:
    """Draws of a generalized Pareto with scale 1: (U^-k - 1) / k, `[count, columns]`."""
    uniform = torch.rand(count, columns, generator=torch.Generator().manual_seed(seed))
    return (uniform.double().pow(-shape) - 1.0) / shape


@pytest.mark.parametrize("shape", [0.2, 0.5, 0.9])
def test_generalized_pareto_shape_recovers_a_known_tail(shape):
    estimate = generalized_pareto_shape(generalized_pareto_sample(shape, 2000, 8, seed=0))
    assert (estimate - shape).abs().max() < 0.12, estimate


def test_pareto_k_hat_separates_light_and_heavy_weights():
    """Log-normal weights of small spread are reliable; Pareto weights with k = 1 are not."""
    generator = torch.Generator().manual_seed(0)
    light = 0.3 * torch.randn(5000, 6, generator=generator, dtype=torch.float64)
    heavy = torch.log(generalized_pareto_sample(1.0, 5000, 6, seed=1) + 1.0)
    assert (pareto_k_hat(light) < 0.5).all()
    assert (pareto_k_hat(heavy) > 0.7).all()
    assert pareto_k_hat(torch.zeros(100, 2)).isnan().all()  # identical weights: no tail


def test_streamed_k_hat_equals_the_one_of_the_whole_sample():
    log_weights = torch.log(generalized_pareto_sample(0.6, 1000, 3, seed=2) + 1.0)
    chunks = iter(log_weights.split(64))
    streamed = chunked_estimate(lambda count: next(chunks)[:count], 1000, 64)
    torch.testing.assert_close(streamed.pareto_k, pareto_k_hat(log_weights))
