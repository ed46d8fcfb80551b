"""A linear-Gaussian model with closed-form log p(x), for testing bounds and estimators."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vgp_bench.distributions import normal_log_prob, standard_normal_log_prob
from vgp_bench.inference.base import SiteSpec
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.trace import Trace


class LinearGaussianModel(LatentVariableModel):
    """z ~ N(0, I_d), x | z ~ N(W z + b, noise^2 I); x is passed as `[B, 1, 1, D_x]`."""

    def __init__(self, x_dim: int = 4, z_dim: int = 2, noise: float = 0.5, seed: int = 0):
        super().__init__((1, 1, x_dim))
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer(
            "weight", torch.randn(x_dim, z_dim, generator=generator, dtype=torch.float64)
        )
        self.register_buffer("bias", torch.randn(x_dim, generator=generator, dtype=torch.float64))
        self.noise = noise
        self.sites = {"z": SiteSpec(context_dim=x_dim, z_dim=z_dim, offers_log_joint=True)}

    def log_marginal(self, x: Tensor) -> Tensor:
        """Exact log p(x) = log N(x; b, W W^T + noise^2 I), `[B]`."""
        flat = x.reshape(x.shape[0], -1).double()
        covariance = self.weight @ self.weight.T + self.noise**2 * torch.eye(
            flat.shape[1], dtype=torch.float64
        )
        distribution = torch.distributions.MultivariateNormal(self.bias, covariance)
        return distribution.log_prob(flat)

    def sample_data(self, n: int, seed: int = 1) -> Tensor:
        generator = torch.Generator().manual_seed(seed)
        z = torch.randn(n, self.weight.shape[1], generator=generator, dtype=torch.float64)
        x = (
            z @ self.weight.T
            + self.bias
            + self.noise
            * torch.randn(n, self.weight.shape[0], generator=generator, dtype=torch.float64)
        )
        return x.float().reshape(n, 1, 1, -1)

    def log_joint_terms(self, flat: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """log p(x | z) and log p(z), `[S, B]`, for x `[B, Dx]` and z `[S, B, D]`."""
        mean = z @ self.weight.T.to(z.dtype) + self.bias.to(z.dtype)  # [S, B, Dx]
        log_likelihood = normal_log_prob(flat.to(z.dtype), mean, torch.full_like(mean, self.noise))
        return log_likelihood, standard_normal_log_prob(z)

    def forward(
        self,
        x: Tensor,
        heads: nn.ModuleDict,
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> Trace:
        flat = x.reshape(x.shape[0], -1)  # [B, Dx]

        def log_joint(z: Tensor) -> Tensor:
            return sum(self.log_joint_terms(flat, z))  # [S, B]

        site = heads["z"](flat, n_samples, generator, log_joint=log_joint)
        log_likelihood, log_prior = self.log_joint_terms(flat, site.z)
        return Trace(
            log_p=log_likelihood + log_prior,
            log_q=site.log_q,
            terms={"log_likelihood": log_likelihood, "log_prior": log_prior, **site.terms},
        )

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        z = torch.randn(n, self.weight.shape[1], generator=generator, dtype=torch.float64)
        return (z @ self.weight.T + self.bias).float().reshape(n, 1, 1, -1)

    def reconstruct(
        self, x: Tensor, heads: nn.ModuleDict, generator: torch.Generator | None = None
    ) -> Tensor:
        site = heads["z"](x.reshape(x.shape[0], -1), 1, generator)
        return (site.z[0] @ self.weight.T.float() + self.bias.float()).reshape(x.shape)
