"""The GP conditional of Eq. 4 at a batch of latent inputs, by triangular solves only.

For a query xi, variational inputs S (kernel matrix K_ss = L L^T) and outputs T:

    a = L^{-1} k_sx,   w = L^{-T} a  (= K_ss^{-1} k_sx),   mean = w^T T,
    variance = k(xi, xi) - ||a||^2   (the same for all d outputs).

K_ss^{-1} and K_ss^{-1} T are never formed, so per-example outputs T cost only w^T T.
Evaluation with thousands of queries per factor (importance sampling, no gradient) takes
another route to the same numbers: L^{-1} once, then a = L^{-1} k_sx and
mean = a^T (L^{-1} T) by matrix products, one triangular solve per query fewer.
Shapes: queries are `[*lead, c]`; the inputs `[*I, M, c]` and outputs `[*O, M, d]` carry
batch shapes I and O that are suffixes of `lead` (empty for global inputs): with
lead = (S, B), global inputs have I = (), amortized per-example ones I = (B,), per-sample
ones I = (S, B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.linalg import solve_triangular

from vgp_bench.gp.fused import global_dense_conditional, solve_weights, solves_need_gradient
from vgp_bench.gp.kernels import ARDKernel


def _split_lead(lead: tuple[int, ...], batch: tuple[int, ...], what: str) -> int:
    """Number of queries per batch element when `batch` is a suffix of `lead`."""
    if len(batch) > len(lead) or tuple(lead[len(lead) - len(batch) :]) != tuple(batch):
        raise ValueError(f"{what} batch shape {tuple(batch)} is not a suffix of {tuple(lead)}")
    return math.prod(lead[: len(lead) - len(batch)])


def batched_contract(weights: Tensor, matrix: Tensor) -> Tensor:
    """sum_k weights[..., k] matrix[..., k, :] for weights `[*lead, K]`, matrix `[*O, K, d]`.

    O is a suffix of lead; runs as one batched matmul, `[*lead, d]`.
    """
    lead, batch = weights.shape[:-1], matrix.shape[:-2]
    count = _split_lead(lead, batch, "matrix")
    rows = weights.reshape(count, *batch, weights.shape[-1]).movedim(0, -2)  # [*O, n, K]
    product = rows @ matrix  # [*O, n, d]
    return product.movedim(-2, 0).reshape(*lead, matrix.shape[-1])


def conditional_weights(
    kernel: ARDKernel,
    inputs: Tensor,
    factor: Tensor,
    query: Tensor,
    min_variance: Tensor,
    matrix: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """w = K_ss^{-1} k_sx `[*lead, M]` and the variance `[*lead]` of Eq. 4 at each query.

    `inputs` `[*I, M, c]`, `factor` `[*I, M, M]` (lower Cholesky of K_ss + jitter I), `query`
    `[*lead, c]`; the variance is clamped below at `min_variance` (`[*I]` or a scalar).
    `matrix`: the K_ss of a factor made without gradients; a gradient then reaches it through
    the hand-derived backward of gp/fused.py (the same forward numbers).
    """
    lead, batch = query.shape[:-1], inputs.shape[:-2]
    count = _split_lead(lead, batch, "inputs")
    columns = query.reshape(count, *batch, query.shape[-1]).movedim(0, -2)  # [*I, n, c]
    cross = kernel(inputs, columns)  # [*I, M, n]
    if solves_need_gradient(matrix, cross):
        assert matrix is not None
        weights, quad = solve_weights(matrix, factor, cross)  # w, ||a||^2
    else:
        projection = solve_triangular(factor, cross, upper=False)  # a: [*I, M, n]
        weights = solve_triangular(factor.transpose(-1, -2), projection, upper=True)  # w
        quad = projection.pow(2).sum(-2)
    variance = kernel.diagonal(columns) - quad  # [*I, n]
    floor = min_variance.unsqueeze(-1) if min_variance.dim() else min_variance
    variance = variance.maximum(floor)
    weights = weights.movedim(-1, 0).reshape(*lead, inputs.shape[-2])  # [*lead, M]
    return weights, variance.movedim(-1, 0).reshape(lead)


@dataclass
class DenseOutputs:
    """Variational outputs T `[*O, M, d]` as the paper has them (a head emits all m x d)."""

    outputs: Tensor  # [*O, M, d]

    def mean(self, weights: Tensor) -> Tensor:
        """mu(xi) = w^T T, `[*lead, d]` (Eq. 4)."""
        return batched_contract(weights, self.outputs)

    def dense(self) -> Tensor:
        """T itself, `[*O, M, d]`."""
        return self.outputs


@dataclass
class LowRankOutputs:
    """T = 1 t0^T + U V with t0 `[*O, d]`, U `[*O, M, r]`, V `[*O, r, d]`.

    The mean w^T T = (sum_n w_n) t0 + (w^T U) V costs O(r (m + d)) per query and T is never
    formed; a head emitting (t0, U, V) makes d + r (m + d) numbers per example instead of m d.
    """

    offset: Tensor  # [*O, d]
    left: Tensor  # [*O, M, r]
    right: Tensor  # [*O, r, d]

    def mean(self, weights: Tensor) -> Tensor:
        """mu(xi) = w^T T without forming T, `[*lead, d]` (Eq. 4)."""
        projected = batched_contract(weights, self.left)  # [*lead, r]
        return weights.sum(-1, keepdim=True) * self.offset + batched_contract(projected, self.right)

    def dense(self) -> Tensor:
        """The T this represents, `[*O, M, d]` (for tests and inspection)."""
        return self.offset.unsqueeze(-2) + self.left @ self.right


VariationalOutputs = DenseOutputs | LowRankOutputs

# queries per factor, as a multiple of M, from which forming L^{-1} once pays (no gradient)
INVERSE_ROUTE_QUERIES_PER_INPUT = 4


def uses_inverse_route(inputs: Tensor, outputs: VariationalOutputs, query: Tensor) -> bool:
    """Whether `conditional_mean_variance` goes through L^{-1}: many queries per factor, dense
    outputs, no gradient (training keeps the triangular solves and their exact backward)."""
    if torch.is_grad_enabled() or not isinstance(outputs, DenseOutputs):
        return False
    lead, batch = query.shape[:-1], inputs.shape[:-2]
    queries_per_factor = _split_lead(lead, batch, "inputs")
    return queries_per_factor >= INVERSE_ROUTE_QUERIES_PER_INPUT * inputs.shape[-2]


@dataclass
class InverseRoute:
    """L^{-1} `[*I, M, M]` and L^{-1} T `[*O, M, d]`: what the inverse route forms once per
    factor and outputs (a head keeps it for every chunk of an evaluation's samples)."""

    inverse_factor: Tensor
    projected_outputs: Tensor


def inverse_route(factor: Tensor, outputs: DenseOutputs) -> InverseRoute:
    """L^{-1} by one triangular solve against I, and L^{-1} T."""
    identity = torch.eye(factor.shape[-1], dtype=factor.dtype, device=factor.device)
    inverse_factor = solve_triangular(factor, identity, upper=False)  # L^{-1} [*I, M, M]
    return InverseRoute(inverse_factor, inverse_factor @ outputs.outputs)


def conditional_by_inverse(
    kernel: ARDKernel,
    inputs: Tensor,
    factor: Tensor,
    outputs: DenseOutputs,
    query: Tensor,
    min_variance: Tensor,
    route: InverseRoute | None = None,
) -> tuple[Tensor, Tensor]:
    """Eq. 4 through L^{-1}: a = L^{-1} k_sx, mean = a^T (L^{-1} T), variance k - ||a||^2.

    The same mean `[*lead, d]` and variance `[*lead]` as `conditional_weights` with
    `DenseOutputs.mean`, by matrix products: L^{-1} and L^{-1} T are formed once per factor
    (`route`, when the caller kept it from an earlier call on the same factor and outputs).
    """
    lead, batch = query.shape[:-1], inputs.shape[:-2]
    route = inverse_route(factor, outputs) if route is None else route
    floor = min_variance.unsqueeze(-1) if min_variance.dim() else min_variance
    if not batch and len(lead) == 2 and route.projected_outputs.dim() == 3:
        return example_major_by_inverse(kernel, inputs, route, query, floor)
    count = _split_lead(lead, batch, "inputs")
    columns = query.reshape(count, *batch, query.shape[-1]).movedim(0, -2)  # [*I, n, c]
    cross = kernel(inputs, columns)  # [*I, M, n]
    projection = route.inverse_factor @ cross  # a: [*I, M, n]
    variance = kernel.diagonal(columns) - projection.pow(2).sum(-2)  # [*I, n]
    variance = variance.maximum(floor).movedim(-1, 0).reshape(lead)
    projection = projection.movedim(-1, 0).reshape(*lead, inputs.shape[-2])  # [*lead, M]
    return batched_contract(projection, route.projected_outputs), variance


def example_major_by_inverse(
    kernel: ARDKernel, inputs: Tensor, route: InverseRoute, query: Tensor, floor: Tensor
) -> tuple[Tensor, Tensor]:
    """`conditional_by_inverse` for global inputs `[M, c]`, queries `[S, B, c]` and per-example
    outputs `[B, M, d]` (an evaluation's chunk): the S queries of each example side by side,
    so that a = L^{-1} k_sx is read as B blocks `[S, M]` by the products with L^{-1} T without
    copying it; the mean `[S, B, d]` and variance `[S, B]`, each column's numbers unchanged."""
    samples, examples, width = query.shape
    columns = query.transpose(0, 1).reshape(examples * samples, width)  # [B S, c]
    projection = route.inverse_factor @ kernel(inputs, columns)  # a: [M, B S]
    variance = kernel.diagonal(columns) - projection.pow(2).sum(-2)  # [B S]
    variance = variance.maximum(floor).reshape(examples, samples).transpose(0, 1)  # [S, B]
    rows = projection.transpose(0, 1).reshape(examples, samples, -1)  # [B, S, M], a view
    return (rows @ route.projected_outputs).transpose(0, 1), variance  # [S, B, d]


def conditional_mean_variance(
    kernel: ARDKernel,
    inputs: Tensor,
    factor: Tensor,
    outputs: VariationalOutputs,
    query: Tensor,
    min_variance: Tensor,
    route: InverseRoute | None = None,
    matrix: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Mean `[*lead, d]` and variance `[*lead]` of f(xi) given the variational data (Eq. 4);
    `route`: L^{-1} and L^{-1} T kept from an earlier call, for the inverse route; `matrix`:
    K_ss of a factor made without gradients (`conditional_weights`)."""
    if isinstance(outputs, DenseOutputs) and uses_inverse_route(inputs, outputs, query):
        return conditional_by_inverse(kernel, inputs, factor, outputs, query, min_variance, route)
    if (
        matrix is not None
        and torch.is_grad_enabled()
        and isinstance(outputs, DenseOutputs)
        and inputs.dim() == outputs.outputs.dim() == 2  # global S and global T
        and min_variance.dim() == 0
    ):
        return global_dense_conditional(
            kernel, inputs, matrix, factor, outputs.outputs, query, min_variance
        )
    weights, variance = conditional_weights(kernel, inputs, factor, query, min_variance, matrix)
    return outputs.mean(weights), variance


def affine_projector(inputs: Tensor, ridge: float = 1e-6) -> Tensor:
    """P = (A^T A + lambda I)^{-1} A^T `[*I, c + 1, M]` for A = [S, 1] `[*I, M, c + 1]` and
    lambda = `ridge` times the mean of A^T A's diagonal: [xi, 1] P T is the least-squares
    affine fit of the outputs T on the inputs S at xi, what a GP with a linear kernel
    interpolates (the paper form's variational data without the GP's nonlinearity)."""
    design = torch.cat([inputs, torch.ones_like(inputs[..., :1])], dim=-1)  # A
    gram = design.transpose(-1, -2) @ design  # [*I, c + 1, c + 1]
    shift = ridge * gram.diagonal(dim1=-2, dim2=-1).mean(-1)  # [*I]
    identity = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    factor = torch.linalg.cholesky(gram + shift[..., None, None] * identity)
    return torch.cholesky_solve(design.transpose(-1, -2), factor)


def affine_weights(projector: Tensor, query: Tensor) -> Tensor:
    """w = P^T [xi, 1] `[*lead, M]` at each query `[*lead, c]`: the affine fit's mean is w^T T,
    in the form of the GP's K_ss^{-1} k_sx (so every kind of outputs takes it)."""
    augmented = torch.cat([query, torch.ones_like(query[..., :1])], dim=-1)  # [*lead, c + 1]
    return batched_contract(augmented, projector)
