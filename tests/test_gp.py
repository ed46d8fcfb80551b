"""GP algebra (kernel, jittered Cholesky, Eq. 4 conditional) against dense float64 references."""

from __future__ import annotations

import pytest
import torch

from vgp_bench.gp import (
    ARDKernel,
    DenseOutputs,
    LowRankOutputs,
    ard_kernel,
    cholesky_with_jitter,
    conditional_mean_variance,
    conditional_weights,
    inverse_route,
    uses_inverse_route,
)
from vgp_bench.gp.cholesky import jitter_levels

DTYPE = torch.float64


def make_kernel(c: int, generator: torch.Generator) -> ARDKernel:
    kernel = ARDKernel(c, variance=1.7).to(DTYPE)
    with torch.no_grad():  # distinct relevance per dimension
        kernel.raw_inverse_lengthscales.add_(torch.randn(c, generator=generator, dtype=DTYPE) * 0.5)
    return kernel


def reference_kernel(left: torch.Tensor, right: torch.Tensor, kernel: ARDKernel) -> torch.Tensor:
    """Eq. 3 by explicit pairwise differences."""
    difference = left.unsqueeze(-2) - right.unsqueeze(-3)  # [..., N, M, c]
    exponent = (kernel.inverse_lengthscales * difference.pow(2)).sum(-1)
    return kernel.variance * torch.exp(-0.5 * exponent)


def reference_conditional(kernel, inputs, outputs, query, jitter):
    """Eq. 4 with an explicit inverse, one query and one (S, T) at a time: mean [d], var []."""
    identity = torch.eye(inputs.shape[0], dtype=DTYPE)
    gram = reference_kernel(inputs, inputs, kernel) + jitter * identity
    inverse = torch.linalg.inv(gram)
    cross = reference_kernel(query[None], inputs, kernel)[0]  # [M]
    return cross @ inverse @ outputs, kernel.variance - cross @ inverse @ cross


def test_kernel_matches_pairwise_definition():
    generator = torch.Generator().manual_seed(0)
    kernel = make_kernel(3, generator)
    left = torch.randn(2, 5, 3, generator=generator, dtype=DTYPE)
    right = torch.randn(2, 7, 3, generator=generator, dtype=DTYPE)
    expected = reference_kernel(left, right, kernel)
    torch.testing.assert_close(kernel(left, right), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        ard_kernel(left, right, kernel.variance, kernel.inverse_lengthscales), expected
    )
    assert torch.allclose(kernel.diagonal(left), kernel.variance.expand(2, 5))
    gram = kernel(left[0], left[0])
    torch.testing.assert_close(torch.diagonal(gram), kernel.variance.expand(5))


def test_kernel_hyperparameters_stay_positive_and_default_to_unit_exponent():
    kernel = ARDKernel(4)
    with torch.no_grad():
        kernel.raw_variance.fill_(-30.0)
        kernel.raw_inverse_lengthscales.fill_(-30.0)
    assert kernel.variance > 0 and (kernel.inverse_lengthscales > 0).all()
    fresh = ARDKernel(4, variance=2.0)
    torch.testing.assert_close(fresh.variance, torch.tensor(2.0))
    torch.testing.assert_close(fresh.inverse_lengthscales, torch.full((4,), 0.25))
    with pytest.raises(ValueError, match="variance"):
        ARDKernel(4, variance=0.0)


@pytest.mark.parametrize("per_sample_outputs", [False, True])
def test_conditional_matches_dense_inverse(per_sample_outputs):
    generator = torch.Generator().manual_seed(1)
    S, B, M, c, d = 3, 2, 9, 2, 4
    kernel = make_kernel(c, generator)
    inputs = torch.randn(M, c, generator=generator, dtype=DTYPE)
    outputs_shape = (S, B, M, d) if per_sample_outputs else (B, M, d)
    outputs = torch.randn(outputs_shape, generator=generator, dtype=DTYPE)
    query = torch.randn(S, B, c, generator=generator, dtype=DTYPE)
    jitter = 1e-6 * kernel.variance.detach()
    cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    mean, variance = conditional_mean_variance(
        kernel, inputs, cholesky.factor, DenseOutputs(outputs), query, cholesky.jitter
    )
    assert mean.shape == (S, B, d) and variance.shape == (S, B)
    for s in range(S):
        for b in range(B):
            table = outputs[s, b] if per_sample_outputs else outputs[b]
            expected_mean, expected_variance = reference_conditional(
                kernel, inputs, table, query[s, b], jitter
            )
            torch.testing.assert_close(mean[s, b], expected_mean, rtol=1e-8, atol=1e-8)
            torch.testing.assert_close(variance[s, b], expected_variance, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(
    ("inputs_shape", "outputs_shape"),
    [((9, 2), (9, 4)), ((9, 2), (5, 9, 4)), ((5, 9, 2), (5, 9, 4))],
    ids=["global", "per-example outputs", "per-example inputs"],
)
def test_inverse_route_gives_the_numbers_of_the_triangular_solves(inputs_shape, outputs_shape):
    """Many queries without gradient go through L^{-1}; the mean and variance are unchanged."""
    generator = torch.Generator().manual_seed(4)
    kernel = make_kernel(2, generator)
    inputs = torch.randn(inputs_shape, generator=generator, dtype=DTYPE)
    outputs = DenseOutputs(torch.randn(outputs_shape, generator=generator, dtype=DTYPE))
    query = torch.randn(40, 5, 2, generator=generator, dtype=DTYPE)  # 40 per example >= 4 M
    cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    arguments = (kernel, inputs, cholesky.factor, outputs, query, cholesky.jitter)
    with torch.no_grad():
        assert uses_inverse_route(inputs, outputs, query)
        assert not uses_inverse_route(inputs, outputs, query[:4])  # few queries: solves
        weights, solved_variance = conditional_weights(
            kernel, inputs, cholesky.factor, query, cholesky.jitter
        )
        by_inverse = conditional_mean_variance(*arguments)
    assert not uses_inverse_route(inputs, outputs, query)  # training keeps the solves
    torch.testing.assert_close(by_inverse[0], outputs.mean(weights), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(by_inverse[1], solved_variance, rtol=1e-9, atol=1e-9)


def test_conditional_interpolates_the_variational_data():
    generator = torch.Generator().manual_seed(2)
    M, c, d = 12, 3, 5
    kernel = make_kernel(c, generator)
    inputs = torch.randn(M, c, generator=generator, dtype=DTYPE)
    outputs = torch.randn(1, M, d, generator=generator, dtype=DTYPE)
    # the jitter perturbs the interpolation by ~ jitter * |K^-1 t|: keep it tiny here
    cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance, initial_jitter=1e-12)
    query = inputs.unsqueeze(1)  # [M, 1, c]: xi = s_n for each n
    mean, variance = conditional_mean_variance(
        kernel, inputs, cholesky.factor, DenseOutputs(outputs), query, cholesky.jitter
    )
    torch.testing.assert_close(mean[:, 0], outputs[0], rtol=0, atol=1e-6)
    assert (variance >= cholesky.jitter).all()
    assert (variance <= 1e-8).all()  # zero up to the jitter and rounding


def test_duplicated_inputs_recover_with_more_jitter():
    generator = torch.Generator().manual_seed(3)
    kernel = make_kernel(2, generator)
    inputs = torch.randn(20, 2, generator=generator, dtype=DTYPE)
    inputs = torch.cat([inputs, inputs[:10]])  # exactly singular K_ss
    gram = kernel(inputs, inputs)
    assert torch.linalg.cholesky_ex(gram).info.item() > 0  # plain Cholesky fails
    results = [
        cholesky_with_jitter(gram, kernel.variance, sync_free=flag) for flag in (False, True)
    ]
    for result in results:
        assert result.jitter.item() >= 1e-6 * kernel.variance.item()
        identity = torch.eye(30, dtype=DTYPE)
        torch.testing.assert_close(result.factor @ result.factor.T, gram + result.jitter * identity)
    assert results[0].jitter.item() == results[1].jitter.item()
    torch.testing.assert_close(results[0].factor, results[1].factor)


@pytest.mark.parametrize("sync_free", [False, True])
def test_jitter_grows_tenfold_per_retry_and_is_reported(sync_free):
    generator = torch.Generator().manual_seed(4)
    basis = torch.randn(6, 3, generator=generator, dtype=DTYPE)
    # smallest eigenvalue -5e-4: needs a jitter above 5e-4, i.e. 1e-3 = 1e-6 * 10^3
    indefinite = basis @ basis.T - 5e-4 * torch.eye(6, dtype=DTYPE)
    batch = torch.stack([indefinite, torch.eye(6, dtype=DTYPE)])  # each matrix its own jitter
    result = cholesky_with_jitter(batch, 1.0, sync_free=sync_free)
    assert result.retries.tolist() == [3, 0]
    torch.testing.assert_close(result.jitter, torch.tensor([1e-3, 1e-6], dtype=DTYPE))
    assert torch.isfinite(result.factor).all()


def test_jitter_cap_is_reported_not_hidden():
    matrix = -torch.eye(4, dtype=DTYPE)
    with pytest.raises(torch.linalg.LinAlgError, match="max_jitter"):
        cholesky_with_jitter(matrix, sync_free=False)
    result = cholesky_with_jitter(matrix, sync_free=True)
    assert torch.isnan(result.factor).all() and result.retries.item() == 4
    assert jitter_levels(1e-6, 10.0, 1e-2) == pytest.approx([1e-6, 1e-5, 1e-4, 1e-3, 1e-2])


def test_amortized_inputs_match_the_global_path():
    generator = torch.Generator().manual_seed(5)
    S, B, M, c, d = 4, 3, 10, 2, 3
    kernel = make_kernel(c, generator)
    inputs = torch.randn(M, c, generator=generator, dtype=DTYPE)
    outputs = DenseOutputs(torch.randn(B, M, d, generator=generator, dtype=DTYPE))
    query = torch.randn(S, B, c, generator=generator, dtype=DTYPE)
    global_cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    expected = conditional_mean_variance(
        kernel, inputs, global_cholesky.factor, outputs, query, global_cholesky.jitter
    )
    for batch_shape in [(B,), (S, B)]:
        batched_inputs = inputs.expand(*batch_shape, M, c)
        cholesky = cholesky_with_jitter(kernel(batched_inputs, batched_inputs), kernel.variance)
        assert cholesky.factor.shape == (*batch_shape, M, M)
        actual = conditional_mean_variance(
            kernel, batched_inputs, cholesky.factor, outputs, query, cholesky.jitter
        )
        torch.testing.assert_close(actual, expected)


def test_low_rank_outputs_equal_their_dense_table():
    generator = torch.Generator().manual_seed(6)
    S, B, M, r, d = 3, 2, 8, 2, 5
    low_rank = LowRankOutputs(
        offset=torch.randn(B, d, generator=generator, dtype=DTYPE),
        left=torch.randn(B, M, r, generator=generator, dtype=DTYPE),
        right=torch.randn(B, r, d, generator=generator, dtype=DTYPE),
    )
    weights = torch.randn(S, B, M, generator=generator, dtype=DTYPE)
    dense = DenseOutputs(low_rank.dense())
    assert dense.outputs.shape == (B, M, d)
    torch.testing.assert_close(low_rank.mean(weights), dense.mean(weights))
    expected = torch.einsum("sbm,bmd->sbd", weights, dense.outputs)
    torch.testing.assert_close(dense.mean(weights), expected)


def test_weights_solve_the_kernel_system_and_shapes_are_checked():
    generator = torch.Generator().manual_seed(7)
    kernel = make_kernel(2, generator)
    inputs = torch.randn(7, 2, generator=generator, dtype=DTYPE)
    query = torch.randn(5, 2, generator=generator, dtype=DTYPE)
    cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    weights, _ = conditional_weights(kernel, inputs, cholesky.factor, query, cholesky.jitter)
    gram = kernel(inputs, inputs) + cholesky.jitter * torch.eye(7, dtype=DTYPE)
    torch.testing.assert_close(gram @ weights.T, kernel(inputs, query))
    with pytest.raises(ValueError, match="suffix"):
        conditional_weights(
            kernel, inputs.expand(3, 7, 2), cholesky.factor.expand(3, 7, 7), query, cholesky.jitter
        )


def test_a_kept_inverse_route_gives_the_numbers_of_a_fresh_one():
    # an evaluation forms L^{-1} and L^{-1} T once per batch and keeps them for every chunk
    generator = torch.Generator().manual_seed(5)
    kernel = make_kernel(2, generator)
    inputs = torch.randn(9, 2, generator=generator, dtype=DTYPE)
    outputs = DenseOutputs(torch.randn(5, 9, 4, generator=generator, dtype=DTYPE))
    cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    with torch.no_grad():  # as the evaluation forms it (in grad mode matmul may group apart)
        route = inverse_route(cholesky.factor, outputs)
        for seed in range(3):  # three chunks of queries
            query = torch.randn(
                40, 5, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE
            )
            arguments = (kernel, inputs, cholesky.factor, outputs, query, cholesky.jitter)
            fresh = conditional_mean_variance(*arguments)
            kept = conditional_mean_variance(*arguments, route)
            assert torch.equal(fresh[0], kept[0]) and torch.equal(fresh[1], kept[1])
