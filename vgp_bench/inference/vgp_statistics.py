"""The VGP's warp statistics: how much z depends on xi (docs/design.md, section 5.2).

`VGPHead.diagnostics` is `warp_statistics` on the head; the helpers are the least-squares fit's
residual covariance, its slopes without their own noise, and a Gaussian's total correlation.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from vgp_bench.distributions import positive_scale
from vgp_bench.gp.kernels import ARDKernel
from vgp_bench.inference.vgp_data import VariationalData


class WarpedFamily(Protocol):
    """What the statistics use of the head (vgp.VGPHead): its data and q(f | xi)."""

    kernel: ARDKernel
    latent_input_dim: int
    z_dim: int
    min_scale: float

    def prepare(self, context: Tensor) -> VariationalData: ...

    def f_moments(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]: ...


@torch.no_grad()
def warp_statistics(
    head: WarpedFamily,
    context: Tensor,
    n_draws: int = 256,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """How much z depends on xi: the warp statistics of docs/design.md, section 5.2, per call.

    Over `n_draws` latent inputs per example (contexts `[B, C]`; a per-sample `[S, B, C]`
    context uses its first sample):
    - `warp_share`: Var_xi[E[z | xi]] / E_xi[Var(z | xi)], averaged over examples and
      dimensions (0: mean-field in disguise);
    - `nonlinear_warp_share`: the same for the part of E[z | xi] no affine map of xi
      explains (0 for a linear warp, which is itself mean-field); the least-squares
      residual over its N - (c + 1) degrees of freedom, since an in-sample fit of c + 1
      coefficients absorbs a share (c + 1) / N of it (at least 2 (c + 1) draws are used);
    - `warp_rank`: the number of directions E[z | xi] moves in (singular values of the
      centred means above 1e-3 of the largest), averaged over examples;
    - `variance_dispersion`: Var_xi[Var(z | xi)] / E_xi[Var(z | xi)]^2, averaged over
      examples and dimensions: how much the spread of z changes with xi (0 for a constant
      spread; the GP variance s(h)^2 v(xi) makes q(z) a scale mixture even when the mean
      warp is affine);
    - `total_correlation`: 1/2 (sum log diag(Sigma) - log det Sigma) in nats, averaged over
      examples, for Sigma = L^T L + diag(E_xi Var(z | xi) + the nonlinear residual), L the
      affine part of the warp: what correlation between the coordinates of z is worth to
      the entropy (0 for a mean-field q; a non-diagonal affine warp makes q(z | x) a
      correlated Gaussian). The fitted slopes' own noise inflates L^T L by the trace of
      (X^T X)^-1 over the slopes times the residual covariance (X the draws' design, its
      intercept column included); that is subtracted and the result projected onto the
      positive semidefinite matrices (exact in expectation for residuals of one spread
      whatever xi; a nonlinear part that grows with |xi| leaves some of the inflation).
    """
    with torch.autocast(device_type=context.device.type, enabled=False):
        context = context[0] if context.dim() == 3 else context
        data = head.prepare(context.to(head.kernel.variance.dtype))
        batch = context.shape[0]
        n_draws = max(n_draws, 2 * (head.latent_input_dim + 1))  # a fit of c + 1 per D
        xi = torch.randn(
            (n_draws, batch, head.latent_input_dim),
            generator=generator,
            device=context.device,
            dtype=context.dtype,
        )
        f_mean, f_scale = head.f_moments(data, xi)  # [N, B, d_f]
        if data.scale is not None:
            mean, variance = f_mean, f_scale.pow(2) + data.scale.pow(2)
        else:  # the GP makes the scale: the mean-field mean is the first half of f
            mean, raw = f_mean.chunk(2, dim=-1)
            variance = f_scale[..., : head.z_dim].pow(2) + positive_scale(raw, head.min_scale).pow(
                2
            )
        centred = (mean - mean.mean(0)).double().movedim(1, 0)  # [B, N, D]
        variance = variance.double()  # [N, B, D]
        expected_variance = variance.mean(0)  # [B, D]
        share = centred.pow(2).sum(1) / (n_draws - 1) / expected_variance
        design = (
            torch.cat([torch.ones_like(xi[..., :1]), xi], dim=-1).double().movedim(1, 0)
        )  # [B, N, c + 1]
        coefficients = torch.linalg.lstsq(design, centred).solution  # [B, c + 1, D]
        residuals = centred - design @ coefficients  # [B, N, D]
        residual_covariance = residual_covariance_of_fit(residuals, design.shape[-1])
        residual = residual_covariance.diagonal(dim1=-2, dim2=-1)  # [B, D]
        nonlinear = residual / expected_variance
        dispersion = variance.var(0) / expected_variance.pow(2)  # [B, D]
        linear = coefficients[:, 1:, :]  # [B, c, D]: E[z | xi] ~ a + linear^T xi
        affine = debiased_affine_covariance(linear, design, residual_covariance)
        total_correlation = gaussian_total_correlation(
            affine + torch.diag_embed(expected_variance + residual)
        )  # [B]
        singular = torch.linalg.svdvals(centred)  # [B, min(N, D)]
        rank = (singular > 1e-3 * singular[:, :1]).sum(-1).double()
    return {
        "warp_share": float(share.mean()),
        "nonlinear_warp_share": float(nonlinear.mean()),
        "warp_rank": float(rank.mean()),
        "variance_dispersion": float(dispersion.mean()),
        "total_correlation": float(total_correlation.mean()),
    }


def residual_covariance_of_fit(residuals: Tensor, parameters: int) -> Tensor:
    """Covariance `[B, D, D]` of least-squares residuals `[B, N, D]` of a fit with `parameters`
    coefficients: their cross-products over N - parameters degrees of freedom (unbiased for
    residuals whose spread does not depend on the regressors)."""
    degrees_of_freedom = residuals.shape[-2] - parameters
    if degrees_of_freedom < 1:
        raise ValueError(
            f"the warp statistics fit {parameters} coefficients per coordinate to "
            f"{residuals.shape[-2]} draws of xi; use more draws than {parameters}"
        )
    return residuals.transpose(-2, -1) @ residuals / degrees_of_freedom


def debiased_affine_covariance(
    slopes: Tensor, design: Tensor, residual_covariance: Tensor
) -> Tensor:
    """L^T L `[B, D, D]` from fitted slopes L `[B, c, D]` without the slopes' noise.

    With Cov(L_k) = (X^T X)^-1_kk Psi for the design X `[B, N, c + 1]` (intercept first) and
    residual covariance Psi, E[L^T L] exceeds the true one by tr((X^T X)^-1 over the slopes) Psi;
    the difference is projected onto the positive semidefinite matrices, as L^T L is.
    """
    gram_inverse = torch.linalg.inv(design.transpose(-2, -1) @ design)  # [B, c + 1, c + 1]
    inflation = gram_inverse[..., 1:, 1:].diagonal(dim1=-2, dim2=-1).sum(-1)  # [B]
    raw = slopes.transpose(-2, -1) @ slopes - inflation[..., None, None] * residual_covariance
    eigenvalues, eigenvectors = torch.linalg.eigh(raw)
    return (eigenvectors * eigenvalues.clamp_min(0.0).unsqueeze(-2)) @ eigenvectors.transpose(
        -2, -1
    )


def gaussian_total_correlation(covariance: Tensor) -> Tensor:
    """1/2 (sum_i log Sigma_ii - log det Sigma) of covariances `[B, D, D]`, `[B]`: the KL from
    a Gaussian to the product of its marginals (0 exactly when Sigma is diagonal)."""
    log_diagonal = covariance.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 0.5 * (log_diagonal - torch.linalg.slogdet(covariance).logabsdet)
