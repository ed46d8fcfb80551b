"""The ARD squared-exponential kernel (Eq. 3) with hyperparameters kept positive by softplus."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def inverse_softplus(value: Tensor) -> Tensor:
    """The unconstrained x with softplus(x) = value (value > 0)."""
    return value + torch.log(-torch.expm1(-value))


def ard_kernel(
    inputs_left: Tensor, inputs_right: Tensor, variance: Tensor, inverse_lengthscales: Tensor
) -> Tensor:
    """k(s, s') = sigma^2_ard exp(-1/2 sum_j omega_j (s_j - s'_j)^2) for all pairs (Eq. 3).

    `inputs_left` `[..., N, c]` and `inputs_right` `[..., M, c]` give `[..., N, M]`.
    """
    root = inverse_lengthscales.sqrt()  # [c]
    left, right = inputs_left * root, inputs_right * root
    squared_distance = (
        left.pow(2).sum(-1).unsqueeze(-1)
        + right.pow(2).sum(-1).unsqueeze(-2)
        - 2.0 * left @ right.transpose(-1, -2)
    )  # [..., N, M]
    return variance * torch.exp(-0.5 * squared_distance.clamp_min(0.0))


class ARDKernel(nn.Module):
    """ARD squared-exponential kernel with theta = (sigma^2_ard, omega_1..c) > 0 (Eq. 3).

    The defaults suit latent inputs xi ~ N(0, I_c): omega_j = 1/c makes the expected
    exponent between two such points -1 for any c, so the kernel neither vanishes nor
    saturates at initialization.
    """

    def __init__(
        self,
        input_dim: int,
        variance: float = 1.0,
        inverse_lengthscale: float | None = None,
    ) -> None:
        super().__init__()
        if input_dim < 1 or variance <= 0:
            raise ValueError(f"need input_dim >= 1 and variance > 0, got {input_dim}, {variance}")
        omega = 1.0 / input_dim if inverse_lengthscale is None else inverse_lengthscale
        if omega <= 0:
            raise ValueError(f"kernel inverse lengthscale must be > 0, got {omega}")
        self.raw_variance = nn.Parameter(inverse_softplus(torch.tensor(float(variance))))
        self.raw_inverse_lengthscales = nn.Parameter(
            inverse_softplus(torch.full((input_dim,), float(omega)))
        )

    @property
    def variance(self) -> Tensor:
        """sigma^2_ard, a 0-dim tensor."""
        return F.softplus(self.raw_variance)

    @property
    def inverse_lengthscales(self) -> Tensor:
        """omega_1..c, `[c]`."""
        return F.softplus(self.raw_inverse_lengthscales)

    def forward(self, inputs_left: Tensor, inputs_right: Tensor) -> Tensor:
        """Cross-covariance `[..., N, M]` of `[..., N, c]` and `[..., M, c]`."""
        return ard_kernel(inputs_left, inputs_right, self.variance, self.inverse_lengthscales)

    def diagonal(self, inputs: Tensor) -> Tensor:
        """k(s, s) = sigma^2_ard for each input of `[..., N, c]`, `[..., N]`."""
        return self.variance.expand(inputs.shape[:-1])
