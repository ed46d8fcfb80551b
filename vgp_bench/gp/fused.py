"""The GP conditional of Eq. 4 with hand-derived backward passes: no autograd through the Cholesky.

Training differentiates the conditional w = K^{-1} k_sx, q = k_sx^T K^{-1} k_sx (K = K_ss +
jitter I = L L^T, factored without gradients) and the kernel matrix K_ss = k(S, S) itself.
Autograd would go back through `linalg.cholesky` (solves with m right-hand sides, O(m^3)) and
through every elementwise pass of the kernel; here the gradients are formed from what the
forward pass kept:

    K gradient     -(z + w diag(g_q)) w^T,   z = K^{-1} g_w   (rank n: the queries' count)
    k_sx gradient  z + 2 w diag(g_q)

and the kernel matrix's gradient is one product of an m x m matrix with S. The forward numbers
are those of `conditional.conditional_weights` and `kernels.ard_kernel`, bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd import Function
from torch.linalg import solve_triangular

from vgp_bench.gp.cholesky import JitteredCholesky, cholesky_with_jitter
from vgp_bench.gp.kernels import ARDKernel


class KernelMatrix(Function):
    """K_ss = sigma^2 exp(-1/2 ||(s_i - s_j) sqrt(omega)||^2) of S `[*I, M, c]` with itself (Eq. 3).

    Backward: with G = g_K o K made symmetric (K is a symmetric function of S, so only the
    symmetric part of g_K acts), l = S sqrt(omega) gets G l - rowsum(G) l; the clamp of the
    squared distance at 0 (coincident points, the diagonal) is not masked: there its gradient
    with respect to l is 0 up to rounding.
    """

    @staticmethod
    def forward(ctx: Any, inputs: Tensor, variance: Tensor, inverse_lengthscales: Tensor) -> Tensor:
        root = inverse_lengthscales.sqrt()  # [c]
        scaled = inputs * root  # l: [*I, M, c]
        half_norms = scaled.pow(2).sum(-1).mul_(0.5)
        # -1/2 the squared distance with ard_kernel's numbers: scaling by 1/2 is exact, so
        # -1/2 ((|l_i|^2 + |l_j|^2) - 2 l_i.l_j) rounds as l_i.l_j - (|l_i|^2 + |l_j|^2) / 2
        exponent = scaled @ scaled.transpose(-1, -2)
        exponent.sub_(half_norms.unsqueeze(-1) + half_norms.unsqueeze(-2))
        matrix = exponent.clamp_max_(0.0).exp_().mul_(variance)
        ctx.save_for_backward(inputs, scaled, root, variance, matrix)
        return matrix

    @staticmethod
    def backward(ctx: Any, grad_matrix: Tensor) -> tuple[Tensor | None, ...]:
        inputs, scaled, root, variance, matrix = ctx.saved_tensors
        weighted = grad_matrix * matrix  # g_K o K = -2 dL/d(distance)
        weighted = weighted + weighted.transpose(-1, -2)  # both uses of each l_i
        row_sums = weighted.sum(-1, keepdim=True)
        grad_variance = row_sums.sum() / (2.0 * variance)
        grad_scaled = weighted @ scaled - row_sums * scaled
        grad_inputs = grad_scaled * root
        grad_root = (grad_scaled * inputs).reshape(-1, root.shape[-1]).sum(0)
        return grad_inputs, grad_variance, grad_root / (2.0 * root)


class KernelSolve(Function):
    """w = K^{-1} k_sx `[*I, M, n]` and q = ||L^{-1} k_sx||^2 `[*I, n]` from the factor L of K.

    `matrix` is the K the factor was made from (its jitter a constant): it takes no part in the
    forward pass and receives the gradient; `factor` itself gets none.
    """

    @staticmethod
    def forward(ctx: Any, matrix: Tensor, factor: Tensor, cross: Tensor) -> tuple[Tensor, Tensor]:
        projection = solve_triangular(factor, cross, upper=False)  # a
        weights = solve_triangular(factor.transpose(-1, -2), projection, upper=True)  # w
        ctx.save_for_backward(factor, weights)
        return weights, projection.pow(2).sum(-2)

    @staticmethod
    def backward(ctx: Any, grad_weights: Tensor, grad_quad: Tensor) -> tuple[Tensor | None, ...]:
        factor, weights = ctx.saved_tensors
        solved = solve_triangular(factor, grad_weights, upper=False)
        solved = solve_triangular(factor.transpose(-1, -2), solved, upper=True)  # z = K^{-1} g_w
        quad_part = weights * grad_quad.unsqueeze(-2)  # w diag(g_q)
        left = solved + quad_part
        grad_matrix = (-left) @ weights.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        grad_cross = left + quad_part if ctx.needs_input_grad[2] else None
        return grad_matrix, None, grad_cross


class KernelSolveMean(Function):
    """The mean w^T T `[n, d]` and q `[n]` for global inputs and global outputs T `[M, d]`.

    `KernelSolve` with the outputs inside: the backward's K^{-1} g_w = K^{-1} T g_mean^T is
    formed as (K^{-1} T) g_mean^T when there are more queries than outputs (n > d: solves with
    d columns instead of n); otherwise as `KernelSolve` forms it.
    """

    @staticmethod
    def forward(
        ctx: Any, matrix: Tensor, factor: Tensor, cross: Tensor, outputs: Tensor
    ) -> tuple[Tensor, Tensor]:
        projection = solve_triangular(factor, cross, upper=False)  # a: [M, n]
        weights = solve_triangular(factor.transpose(-1, -2), projection, upper=True)  # w
        ctx.save_for_backward(factor, weights, outputs)
        return weights.transpose(-1, -2) @ outputs, projection.pow(2).sum(-2)

    @staticmethod
    def backward(ctx: Any, grad_mean: Tensor, grad_quad: Tensor) -> tuple[Tensor | None, ...]:
        factor, weights, outputs = ctx.saved_tensors
        upper = factor.transpose(-1, -2)
        if weights.shape[-1] > outputs.shape[-1]:  # K^{-1} T, then times g_mean^T
            solved = solve_triangular(factor, outputs, upper=False)
            solved = solve_triangular(upper, solved, upper=True) @ grad_mean.transpose(-1, -2)
        else:  # K^{-1} (T g_mean^T)
            solved = solve_triangular(factor, outputs @ grad_mean.transpose(-1, -2), upper=False)
            solved = solve_triangular(upper, solved, upper=True)
        quad_part = weights * grad_quad.unsqueeze(-2)  # w diag(g_q)
        left = solved + quad_part
        needs = ctx.needs_input_grad
        grad_matrix = (-left) @ weights.transpose(-1, -2) if needs[0] else None
        grad_cross = left + quad_part if needs[2] else None
        grad_outputs = weights @ grad_mean if needs[3] else None
        return grad_matrix, None, grad_cross, grad_outputs


def kernel_matrix(kernel: ARDKernel, inputs: Tensor) -> Tensor:
    """k(S, S) `[*I, M, M]` for S `[*I, M, c]`, the same numbers as `kernel(inputs, inputs)`,
    with the hand-derived backward of `KernelMatrix`."""
    return KernelMatrix.apply(inputs, kernel.variance, kernel.inverse_lengthscales)


def factor_kernel_matrix(
    kernel: ARDKernel, inputs: Tensor, initial_jitter: float, max_jitter: float
) -> JitteredCholesky:
    """The jittered Cholesky of k(S, S) made without gradients, K_ss kept beside it.

    The factor, jitter and retries are `cholesky_with_jitter`'s (the same numbers); the
    gradient reaches S and the kernel through `matrix` by `KernelSolve`, never through the
    factorization.
    """
    matrix = kernel_matrix(kernel, inputs)  # K_ss [*I, M, M]
    with torch.no_grad():
        cholesky = cholesky_with_jitter(
            matrix, kernel.variance, initial_jitter=initial_jitter, max_jitter=max_jitter
        )
    cholesky.matrix = matrix
    return cholesky


def solve_weights(matrix: Tensor, factor: Tensor, cross: Tensor) -> tuple[Tensor, Tensor]:
    """(K^{-1} k_sx, ||L^{-1} k_sx||^2) for the factor L of `matrix` + jitter I, gradients to
    `matrix` and `cross` by `KernelSolve`'s backward."""
    return KernelSolve.apply(matrix, factor.detach(), cross)


def global_dense_conditional(
    kernel: ARDKernel,
    inputs: Tensor,
    matrix: Tensor,
    factor: Tensor,
    outputs: Tensor,
    query: Tensor,
    min_variance: Tensor,
) -> tuple[Tensor, Tensor]:
    """Mean `[*lead, d]` and variance `[*lead]` of Eq. 4 for global inputs S `[M, c]` and
    global outputs T `[M, d]` by `KernelSolveMean`: `conditional_mean_variance`'s numbers."""
    lead = query.shape[:-1]
    columns = query.reshape(-1, query.shape[-1])  # [n, c]
    cross = kernel(inputs, columns)  # [M, n]
    mean, quad = KernelSolveMean.apply(matrix, factor.detach(), cross, outputs)
    variance = (kernel.diagonal(columns) - quad).maximum(min_variance)
    return mean.reshape(*lead, outputs.shape[-1]), variance.reshape(lead)


def solves_need_gradient(matrix: Tensor | None, cross: Tensor) -> bool:
    """Whether the conditional should go through `KernelSolve` (a gradient is asked for)."""
    return (
        matrix is not None
        and torch.is_grad_enabled()
        and (matrix.requires_grad or cross.requires_grad)
    )
