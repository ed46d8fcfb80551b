"""The GP conditional's hand-derived backward (gp/fused.py) against autograd, in float64."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import varied_seed
from vgp_bench.gp import (
    ARDKernel,
    DenseOutputs,
    LowRankOutputs,
    cholesky_with_jitter,
    conditional_mean_variance,
)
from vgp_bench.gp.cholesky import with_jitter
from vgp_bench.gp.fused import (
    KernelMatrix,
    KernelSolve,
    KernelSolveMean,
    factor_kernel_matrix,
    kernel_matrix,
)

DTYPE = torch.float64


def make_kernel(c: int, generator: torch.Generator, dtype: torch.dtype = DTYPE) -> ARDKernel:
    kernel = ARDKernel(c, variance=0.7).to(dtype)
    with torch.no_grad():  # distinct relevance per dimension
        kernel.raw_inverse_lengthscales.add_(torch.randn(c, generator=generator).to(dtype) * 0.5)
    return kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_kernel_matrix_gives_the_kernels_numbers_bit_for_bit(dtype, batch):
    generator = torch.Generator().manual_seed(varied_seed(0))
    kernel = make_kernel(5, generator, dtype)
    inputs = torch.randn(*batch, 40, 5, generator=generator).to(dtype)
    assert torch.equal(kernel_matrix(kernel, inputs), kernel(inputs, inputs))


@pytest.mark.parametrize("batch", [(), (2,)])
def test_kernel_matrix_backward_passes_gradcheck(batch):
    generator = torch.Generator().manual_seed(varied_seed(1))
    inputs = torch.randn(*batch, 6, 3, generator=generator, dtype=DTYPE, requires_grad=True)
    variance = torch.tensor(0.8, dtype=DTYPE, requires_grad=True)
    omega = (0.3 + torch.rand(3, generator=generator, dtype=DTYPE)).requires_grad_()
    assert torch.autograd.gradcheck(KernelMatrix.apply, (inputs, variance, omega))


def make_problem(m: int, n: int, batch: tuple[int, ...], seed: int):
    """A positive-definite K (from the kernel, jittered), its factor and queries' k_sx."""
    generator = torch.Generator().manual_seed(varied_seed(seed))
    kernel = make_kernel(3, generator)
    inputs = torch.randn(*batch, m, 3, generator=generator, dtype=DTYPE)
    query = torch.randn(*batch, n, 3, generator=generator, dtype=DTYPE)
    with torch.no_grad():
        matrix = kernel(inputs, inputs)
        factor = cholesky_with_jitter(matrix, kernel.variance, initial_jitter=1e-3).factor
    return matrix, factor, kernel(inputs, query)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_kernel_solve_backward_passes_gradcheck(batch):
    matrix, factor, cross = make_problem(7, 3, batch, seed=2)
    matrix.requires_grad_()
    cross.requires_grad_()
    # the factor follows the matrix: K + jitter I = L L^T at every point gradcheck visits
    jitter = (factor @ factor.mT - matrix).diagonal(dim1=-2, dim2=-1).mean(-1).detach()

    def solved(matrix, cross):
        symmetric = (matrix + matrix.mT) / 2  # gradcheck perturbs one entry, K is symmetric
        jittered = symmetric + jitter[..., None, None] * torch.eye(7, dtype=DTYPE)
        return KernelSolve.apply(symmetric, torch.linalg.cholesky(jittered.detach()), cross)

    assert torch.autograd.gradcheck(solved, (matrix, cross))


@pytest.mark.parametrize("queries, outputs", [(3, 2), (2, 3)])  # both ways to form K^{-1} g_w
def test_kernel_solve_with_the_mean_passes_gradcheck(queries, outputs):
    matrix, factor, cross = make_problem(7, queries, (), seed=7)
    generator = torch.Generator().manual_seed(varied_seed(8))
    table = torch.randn(7, outputs, generator=generator, dtype=DTYPE, requires_grad=True)
    matrix.requires_grad_()
    cross.requires_grad_()
    jitter = (factor @ factor.mT - matrix).diagonal().mean().detach()

    def solved(matrix, cross, table):
        symmetric = (matrix + matrix.mT) / 2
        jittered = symmetric + jitter * torch.eye(7, dtype=DTYPE)
        return KernelSolveMean.apply(
            symmetric, torch.linalg.cholesky(jittered.detach()), cross, table
        )

    assert torch.autograd.gradcheck(solved, (matrix, cross, table))


def conditional_gradients(
    m: int, n: int, fused: bool, seed: int, low_rank: bool = False
) -> list[torch.Tensor]:
    """Gradients of a random linear function of Eq. 4's mean and variance with respect to S,
    T and the kernel's parameters, through `factor_kernel_matrix` or autograd; T global
    (`KernelSolveMean`) or of rank 2 (`KernelSolve`)."""
    generator = torch.Generator().manual_seed(varied_seed(seed))
    kernel = make_kernel(4, generator)
    with torch.no_grad():
        kernel.raw_variance.fill_(-3.0)  # sigma^2 ~ 0.05, near the default's 0.01
    inputs = torch.randn(m, 4, generator=generator, dtype=DTYPE, requires_grad=True)
    outputs = (0.1 * torch.randn(m, 5, generator=generator, dtype=DTYPE)).requires_grad_()
    query = torch.randn(n, 4, generator=generator, dtype=DTYPE, requires_grad=True)
    mean_weight = torch.randn(n, 5, generator=generator, dtype=DTYPE)
    variance_weight = torch.randn(n, generator=generator, dtype=DTYPE)
    if fused:
        cholesky = factor_kernel_matrix(kernel, inputs, 1e-6, 1e-2)
        assert not cholesky.factor.requires_grad
    else:
        cholesky = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    low_rank_table = LowRankOutputs(outputs[0], outputs[:, :2], outputs[:2])
    table = low_rank_table if low_rank else DenseOutputs(outputs)
    mean, variance = conditional_mean_variance(
        kernel, inputs, cholesky.factor, table, query, cholesky.jitter, matrix=cholesky.matrix
    )
    ((mean * mean_weight).sum() + (variance * variance_weight).sum()).backward()
    parameters = [inputs, outputs, query, kernel.raw_variance, kernel.raw_inverse_lengthscales]
    return [parameter.grad for parameter in parameters]


@pytest.mark.parametrize("low_rank", [False, True])
@pytest.mark.parametrize("n", [20, 100])
def test_fused_conditional_agrees_with_autograd_at_m_500(n, low_rank):
    names = ["inputs", "outputs", "query", "raw_variance", "raw_inverse_lengthscales"]
    expected = conditional_gradients(500, n, fused=False, seed=3, low_rank=low_rank)
    actual = conditional_gradients(500, n, fused=True, seed=3, low_rank=low_rank)
    # sigma^2's gradient is a difference of terms ~1000x larger (the mean w^T T does not depend
    # on sigma^2): its rounding is relatively that much larger, in either computation
    tolerances = {"raw_variance": 1e-5}
    for name, want, got in zip(names, expected, actual, strict=True):
        assert got is not None and torch.isfinite(got).all(), name
        error = (got - want).norm() / want.norm()
        assert error < tolerances.get(name, 1e-7), (name, error.item())


def test_fused_forward_numbers_are_the_autograd_paths():
    generator = torch.Generator().manual_seed(varied_seed(4))
    kernel = make_kernel(3, generator, torch.float32)
    inputs = torch.randn(60, 3, generator=generator, requires_grad=True)
    outputs = DenseOutputs(torch.randn(60, 2, generator=generator))
    query = torch.randn(4, 5, 3, generator=generator)
    fused = factor_kernel_matrix(kernel, inputs, 1e-6, 1e-2)
    plain = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance)
    assert torch.equal(fused.factor, plain.factor) and torch.equal(fused.jitter, plain.jitter)
    first = conditional_mean_variance(
        kernel, inputs, fused.factor, outputs, query, fused.jitter, matrix=fused.matrix
    )
    second = conditional_mean_variance(kernel, inputs, plain.factor, outputs, query, plain.jitter)
    for got, want in zip(first, second, strict=True):
        assert torch.equal(got, want)


def test_the_jitter_retries_are_those_of_the_plain_factorization():
    generator = torch.Generator().manual_seed(varied_seed(5))
    kernel = make_kernel(2, generator)
    inputs = torch.randn(20, 2, generator=generator, dtype=DTYPE)
    inputs = torch.cat([inputs, inputs[:10]]).requires_grad_()  # duplicates: K is singular
    assert torch.linalg.cholesky_ex(kernel(inputs, inputs)).info.item() > 0
    fused = factor_kernel_matrix(kernel, inputs, 1e-18, 1e-2)
    plain = cholesky_with_jitter(kernel(inputs, inputs), kernel.variance, initial_jitter=1e-18)
    assert fused.retries.item() == plain.retries.item() > 0
    assert torch.equal(fused.factor, plain.factor)
    query = torch.randn(4, 2, generator=generator, dtype=DTYPE)
    mean, variance = conditional_mean_variance(
        kernel,
        inputs,
        fused.factor,
        DenseOutputs(torch.ones(30, 1, dtype=DTYPE)),
        query,
        fused.jitter,
        matrix=fused.matrix,
    )
    (mean.sum() + variance.sum()).backward()
    assert inputs.grad is not None and torch.isfinite(inputs.grad).all()


@pytest.mark.parametrize("batch", [(), (3,)])
def test_the_jitter_goes_on_the_diagonal_with_the_numbers_of_adding_jitter_times_identity(batch):
    generator = torch.Generator().manual_seed(varied_seed(6))
    for dtype in (torch.float32, torch.float64):
        root = torch.randn(*batch, 30, 30, generator=generator).to(dtype)
        matrix = root @ root.mT
        jitter = torch.rand(batch, generator=generator).to(dtype) * 1e-3
        expected = matrix + jitter[..., None, None] * torch.eye(30, dtype=dtype)
        assert torch.equal(with_jitter(matrix, jitter), expected)


def backward_nodes(tensor: torch.Tensor) -> set[str]:
    """The names of every autograd node behind `tensor`."""
    names, seen, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(parent for parent, _ in node.next_functions)
    return names


@pytest.mark.parametrize(
    "options",
    [
        {},  # the default: global S and T, identity prior mean, tied scale, collapsed
        {"inputs": "amortized"},
        {"outputs": "dense", "prior_mean": "zero", "mean_field_scale": "context"},
        {"outputs": "low_rank", "objective": "hierarchical"},
        {"outputs": "shared_basis", "objective": "collapsed", "aux_samples": 2},
        {"prior_mean": "zero", "mean_field_scale": "context", "objective": "paper"},
    ],
)
def test_every_gp_configuration_differentiates_without_the_cholesky(options):
    from vgp_bench.inference.base import SiteSpec
    from vgp_bench.inference.vgp import VGPHead

    torch.manual_seed(varied_seed(9))
    head = VGPHead(
        SiteSpec(context_dim=4, z_dim=3), variational_data_size=12, aux_hidden_dims=(8,), **options
    )
    context = torch.randn(5, 4, generator=torch.Generator().manual_seed(varied_seed(10)))
    sample = head(context, 2, torch.Generator().manual_seed(varied_seed(11)))
    nodes = backward_nodes(sample.log_q.sum() + sample.z.sum())
    assert not any("Cholesky" in name for name in nodes), sorted(nodes)
    assert {"KernelMatrixBackward", "KernelSolveBackward", "KernelSolveMeanBackward"} & nodes
    (sample.log_q.sum() + sample.z.sum()).backward()
    inputs = head.inputs if options.get("inputs") != "amortized" else head.input_net.weight
    assert inputs.grad is not None and torch.isfinite(inputs.grad).all()
