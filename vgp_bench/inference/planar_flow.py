"""Normalizing flows (inference=planar_flow): a mean-field Gaussian pushed through k planar maps.

Rezende & Mohamed (2015), Eqs. 10-12 and Appendix A.1: z_0 ~ N(mu(h), diag(sigma(h)^2)) and

    z_k = z_{k-1} + u^_k tanh(w_k^T z_{k-1} + b_k),             k = 1..K,
    log q_K(z_K) = log q_0(z_0) - sum_k log |1 + u^_k^T psi_k(z_{k-1})|,
    psi_k(z) = tanh'(w_k^T z + b_k) w_k,

with u^ = u + (m(w^T u) - w^T u) w / |w|^2, m(a) = -1 + softplus(a), so that w^T u^ > -1 and
every map is invertible. The flow parameters (u_k, w_k, b_k) are made from the site's context
(the encoder's features) by one linear layer, as in that paper's amortized flows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vgp_bench.errors import ConfigError
from vgp_bench.inference.base import LogJoint, SiteSample, SiteSpec, VariationalHead
from vgp_bench.inference.mean_field import MeanFieldHead

SOFTPLUS_INVERSE_ONE = math.log(math.e - 1.0)  # softplus(a) = 1, i.e. m(a) = 0


def constrained_direction(u: Tensor, w: Tensor) -> Tensor:
    """u^ = u + (m(w^T u) - w^T u) w / |w|^2 with m(a) = -1 + softplus(a): w^T u^ > -1."""
    w_dot_u = (w * u).sum(-1, keepdim=True)  # [..., 1]
    m = F.softplus(w_dot_u) - 1.0
    return u + (m - w_dot_u) * w / w.pow(2).sum(-1, keepdim=True)


def planar_map(z: Tensor, u_hat: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """One planar map f(z) = z + u^ tanh(w^T z + b) and log |det df/dz|, `[..., D]`, `[...]`.

    u^ must already satisfy the constraint (`constrained_direction`); b is `[..., 1]`.
    """
    activation = torch.tanh((w * z).sum(-1, keepdim=True) + b)  # [..., 1]
    slope = 1.0 - activation.pow(2)  # tanh'
    determinant = 1.0 + slope.squeeze(-1) * (w * u_hat).sum(-1)  # 1 + u^T psi(z), [...]
    log_det = torch.log(determinant.abs().clamp_min(torch.finfo(z.dtype).tiny))
    return z + u_hat * activation, log_det


class PlanarFlowHead(VariationalHead):
    """q_K(z | h): a mean-field Gaussian q_0(z_0 | h) followed by `flow_length` planar maps.

    log q~ = log q_0(z_0) - sum_k log |det| is the exact density of z_K (the maps are
    invertible), so the importance weight is unbiased for p(x). At initialization every map is
    near the identity (u^ ~ 0), so the head starts as the mean-field one; `init_scale` sets how
    strongly the flow parameters depend on the context at first.
    """

    def __init__(
        self,
        spec: SiteSpec,
        flow_length: int = 80,
        hidden_dims: Sequence[int] = (),
        activation: str = "tanh",
        min_scale: float = 1e-4,
        init_scale: float = 0.01,
    ) -> None:
        super().__init__(spec)
        if int(flow_length) < 0:
            raise ConfigError(f"inference.flow_length must be >= 0, got {flow_length}")
        self.flow_length = int(flow_length)
        self.initial = MeanFieldHead(spec, hidden_dims, activation, min_scale)
        d = spec.z_dim
        self.flow_net = nn.Linear(spec.context_dim, self.flow_length * (2 * d + 1))
        with torch.no_grad():  # u = 0.54 w / |w|^2, so m(w^T u) = 0 and u^ = 0: the identity
            self.flow_net.weight.mul_(init_scale)
            w = torch.randn(self.flow_length, d) / math.sqrt(d)  # [K, D], |w| ~ 1
            u = SOFTPLUS_INVERSE_ONE * w / w.pow(2).sum(-1, keepdim=True)
            bias = torch.cat([u, w, torch.zeros(self.flow_length, 1)], dim=-1)  # [K, 2D + 1]
            self.flow_net.bias.copy_(bias.reshape(-1))

    def flow_parameters(self, context: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """u^, w `[*batch, K, D]` and b `[*batch, K, 1]` from the context `[*batch, C]`."""
        d = self.spec.z_dim
        parameters = self.flow_net(context).unflatten(-1, (self.flow_length, 2 * d + 1))
        u, w, b = parameters.split([d, d, 1], dim=-1)
        return constrained_direction(u, w), w, b

    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,  # not needed: the flow does not look at p
    ) -> SiteSample:
        base = self.initial(context, n_samples, generator)
        u_hat, w, b = self.flow_parameters(context)  # [*batch, K, D], broadcast over S
        z = base.z  # [S, B, D]
        log_det_total = torch.zeros_like(base.log_q)  # [S, B]
        for k in range(self.flow_length):
            z, log_det = planar_map(z, u_hat[..., k, :], w[..., k, :], b[..., k, :])
            log_det_total = log_det_total + log_det
        log_q = base.log_q - log_det_total
        return SiteSample(
            z=z, log_q=log_q, terms={"log_q_z0": base.log_q, "flow_log_det": log_det_total}
        )
