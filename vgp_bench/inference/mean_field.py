"""The mean-field Gaussian family of the variational auto-encoder (inference=vae)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vgp_bench.distributions import LOG_2PI, check_scale_link, positive_scale
from vgp_bench.inference.base import LogJoint, SiteSample, SiteSpec, VariationalHead
from vgp_bench.nets import initialize, mlp


class MeanFieldHead(VariationalHead):
    """q(z | h) = N(mu(h), diag(sigma(h)^2)), reparameterized: z = mu + sigma * eps."""

    def __init__(
        self,
        spec: SiteSpec,
        hidden_dims: Sequence[int] = (),
        activation: str = "tanh",
        min_scale: float = 1e-4,
        scale_link: str = "softplus",
        init: str = "default",
    ) -> None:
        super().__init__(spec)
        check_scale_link(scale_link, "inference.scale_link")
        self.parameter_net = mlp(spec.context_dim, hidden_dims, 2 * spec.z_dim, activation)
        initialize(self.parameter_net, init, "inference.init")
        self.min_scale = min_scale
        self.scale_link = scale_link

    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,  # not needed: z does not depend on p
    ) -> SiteSample:
        mean, raw_scale = self.parameter_net(context).chunk(2, dim=-1)  # [B, D] or [S, B, D]
        scale = positive_scale(raw_scale, self.min_scale, self.scale_link)
        batch_shape = mean.shape[-2:] if mean.dim() == 2 else mean.shape[1:]
        noise = torch.randn(
            (n_samples, *batch_shape), generator=generator, device=mean.device, dtype=mean.dtype
        )  # [S, B, D]
        z = mean + scale * noise
        log_q = -0.5 * (noise.pow(2) + LOG_2PI).sum(-1) - torch.log(scale).sum(-1)  # [S, B]
        return SiteSample(z=z, log_q=log_q, terms={"log_q_z": log_q})
