"""Hamiltonian variational inference (inference=hvi), Salimans, Kingma & Welling (2015).

An initial Gaussian q(z_0 | x) and a momentum v_0 ~ q(v_0 | x, z_0) are moved by L leapfrog
steps of Hamiltonian dynamics on log p(x, z), with learned step sizes eps_l (per step and
dimension) and a learned diagonal mass M:

    v <- v + eps/2 grad_z log p(x, z);   z <- z + eps M^-1 v;   v <- v + eps/2 grad_z log p(x, z)

Each half step is a shear, so the map (z_0, v_0) -> (z_L, v_L) has unit Jacobian and
q(z_L, v_L) = q(z_0) q(v_0 | z_0). With a learned reverse model r(v_L | x, z_L) the bound is

    log p(x, z_L) + log r(v_L | x, z_L) - log q(z_0 | x) - log q(v_0 | x, z_0),

so the head returns log q~ = log q(z_0 | x) + log q(v_0 | x, z_0) - log r(v_L | x, z_L); its
importance weight is unbiased for p(x). With L = 0 no momentum is drawn (it would not move z,
and only lower the bound by KL(q(v_0 | .) || r(v_0 | .))): the head is then the mean-field one.

The gradient of log p(x, z) comes from the model through `log_joint` (sites whose spec
`offers_log_joint`); while gradients are recorded the leapfrog steps stay in the graph
(create_graph), so the bound's gradient flows through the dynamics to every parameter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vgp_bench.distributions import normal_log_prob, positive_scale
from vgp_bench.errors import ConfigError
from vgp_bench.inference.base import LogJoint, SiteSample, SiteSpec, VariationalHead
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.nets import mlp

NO_LOG_JOINT = (
    "inference=hvi moves z along grad_z log p(x, z), which this model's site does not offer "
    "(models with sequential sites, such as draw, cannot); use a model with one joint site "
    "(dlgm1, dlgm2) or another inference (vae, vgp, planar_flow)"
)


def log_joint_gradient(log_joint: LogJoint, z: Tensor, create_graph: bool) -> Tensor:
    """grad_z log p(x, z) for z `[S, B, D]`; kept in the graph when `create_graph`."""
    with torch.enable_grad():
        if not (create_graph and z.requires_grad):
            z = z.detach().requires_grad_(True)
        (gradient,) = torch.autograd.grad(log_joint(z).sum(), z, create_graph=create_graph)
    return gradient


def leapfrog(
    z: Tensor,
    v: Tensor,
    gradient: Tensor,
    step_size: Tensor,
    inverse_mass: Tensor,
    log_joint: LogJoint,
    create_graph: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """One leapfrog step from (z, v) with `gradient` = grad log p at z: (z', v', grad at z')."""
    v = v + 0.5 * step_size * gradient
    z = z + step_size * inverse_mass * v
    gradient = log_joint_gradient(log_joint, z, create_graph)
    v = v + 0.5 * step_size * gradient
    return z, v, gradient


def leapfrog_trajectory(
    z: Tensor,
    v: Tensor,
    log_joint: LogJoint,
    step_sizes: Tensor,
    inverse_mass: Tensor,
    create_graph: bool,
) -> tuple[Tensor, Tensor]:
    """(z_L, v_L) after one leapfrog step per row of `step_sizes` `[L, D]` from (z, v) `[S, B, D]`.

    Volume preserving, and reversible: from (z_L, -v_L) with the rows of `step_sizes` in
    reverse order it returns to (z, -v).
    """
    gradient = log_joint_gradient(log_joint, z, create_graph)
    for step_size in step_sizes:
        z, v, gradient = leapfrog(z, v, gradient, step_size, inverse_mass, log_joint, create_graph)
    return z, v


class ConditionalGaussian(nn.Module):
    """N(mean(h, z), diag(scale(h, z)^2)) over a momentum v, from an MLP on [h, z]."""

    def __init__(
        self,
        context_dim: int,
        z_dim: int,
        hidden_dims: Sequence[int],
        activation: str,
        min_scale: float,
    ) -> None:
        super().__init__()
        self.net = mlp(context_dim + z_dim, hidden_dims, 2 * z_dim, activation)
        self.min_scale = min_scale
        with torch.no_grad():  # starts at N(0, I), close to a momentum of unit mass
            self.net[-1].weight.mul_(0.01)
            self.net[-1].bias[:z_dim].zero_()
            self.net[-1].bias[z_dim:].fill_(math.log(math.expm1(1.0 - min_scale)))

    def forward(self, context: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale `[S, B, D]` for a context `[B, C]` or `[S, B, C]` and z `[S, B, D]`."""
        context = context.expand(*z.shape[:-1], context.shape[-1])  # [S, B, C]
        mean, raw_scale = self.net(torch.cat([context, z], dim=-1)).chunk(2, dim=-1)
        return mean, positive_scale(raw_scale, self.min_scale)


class HVIHead(VariationalHead):
    """q(z_L | x) by L leapfrog steps from a mean-field start, with momentum and reverse models.

    Options: `leapfrog_steps` L (Salimans et al.: 8 for the DLGM of Table 1); `step_size`, the
    initial eps (learned per step and dimension, positive by softplus); the inverse diagonal
    mass starts at 1 and is learned; `hidden_dims` for the initial Gaussian's MLP on the
    context; `aux_hidden_dims` for the MLPs of q(v_0 | x, z_0) and r(v_L | x, z_L).
    """

    def __init__(
        self,
        spec: SiteSpec,
        leapfrog_steps: int = 8,
        step_size: float = 0.05,
        hidden_dims: Sequence[int] = (),
        aux_hidden_dims: Sequence[int] = (256,),
        activation: str = "tanh",
        min_scale: float = 1e-4,
    ) -> None:
        super().__init__(spec)
        if not spec.offers_log_joint:
            raise ConfigError(NO_LOG_JOINT)
        if int(leapfrog_steps) < 0 or step_size <= 0:
            raise ValueError(
                "inference.leapfrog_steps must be >= 0 and inference.step_size > 0, got "
                f"{leapfrog_steps} and {step_size}"
            )
        self.leapfrog_steps = int(leapfrog_steps)
        d = spec.z_dim
        self.initial = MeanFieldHead(spec, hidden_dims, activation, min_scale)
        if self.leapfrog_steps == 0:  # the mean-field head: no dynamics, nothing else to learn
            return
        self.momentum = ConditionalGaussian(
            spec.context_dim, d, aux_hidden_dims, activation, min_scale
        )
        self.reverse = ConditionalGaussian(
            spec.context_dim, d, aux_hidden_dims, activation, min_scale
        )
        softplus_inverse = math.log(math.expm1(step_size))
        self.raw_step_size = nn.Parameter(torch.full((self.leapfrog_steps, d), softplus_inverse))
        self.raw_inverse_mass = nn.Parameter(torch.full((d,), math.log(math.expm1(1.0))))

    def step_sizes(self) -> Tensor:
        """eps_l, `[L, D]`."""
        return F.softplus(self.raw_step_size)

    def inverse_mass(self) -> Tensor:
        """Diagonal of M^-1, `[D]`."""
        return F.softplus(self.raw_inverse_mass)

    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,
    ) -> SiteSample:
        if log_joint is None:
            raise ValueError(NO_LOG_JOINT)
        start = self.initial(context, n_samples, generator)
        if self.leapfrog_steps == 0:
            return SiteSample(z=start.z, log_q=start.log_q, terms={"log_q_z0": start.log_q})
        z = start.z  # [S, B, D]
        mean, scale = self.momentum(context, z)
        noise = torch.randn(z.shape, generator=generator, device=z.device, dtype=z.dtype)
        v = mean + scale * noise  # v_0 ~ q(v_0 | x, z_0), [S, B, D]
        log_q_v0 = normal_log_prob(v, mean, scale)  # [S, B]
        create_graph = torch.is_grad_enabled()  # evaluation: gradients of p only, no graph
        z, v = leapfrog_trajectory(
            z, v, log_joint, self.step_sizes(), self.inverse_mass(), create_graph
        )
        log_r_vL = normal_log_prob(v, *self.reverse(context, z))  # [S, B]
        log_q = start.log_q + log_q_v0 - log_r_vL
        return SiteSample(
            z=z,
            log_q=log_q,
            terms={"log_q_z0": start.log_q, "log_q_v0": log_q_v0, "log_r_vL": log_r_vL},
        )
