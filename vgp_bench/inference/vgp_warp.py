"""How the VGP's latent input becomes f and z: the prior mean, the warp and the mean-field scale.

One part per value of `inference.prior_mean`, `inference.warp` and `inference.mean_field_scale`
(docs/design.md, sections 2.6-2.8); `PRIOR_MEANS`, `WARPS` and `MEAN_FIELD_SCALES` name the
choices. Per call a part adds its piece to the variational data (`prepare`, in the order
VGPHead.prepare gives) and, for the prior mean and the warp, makes the moments of q(f | xi).
Parameters keep the names the head had before the parts existed (`location_net`,
`warp_scale_net`, `scale_net`): the head registers them under those names.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor, nn

from vgp_bench.distributions import positive_scale
from vgp_bench.gp.conditional import affine_projector, affine_weights
from vgp_bench.gp.kernels import ARDKernel
from vgp_bench.inference.vgp_data import VariationalData

Gaussian = tuple[Tensor, Tensor]  # mean and scale, each [..., dim]
GPMoments = Callable[[VariationalData, Tensor], tuple[Tensor, Tensor]]  # mean, variance of g


class PriorMean(nn.Module, ABC):
    """The GP's prior mean: f = m(h) + s(h) g(xi) or f = g(xi), g the GP on (S, T)."""

    starts_mean_field = False  # T = 0 and a small constant sigma at the start

    def __init__(
        self, features: int, z_dim: int, min_scale: float, scale_link: str = "softplus"
    ) -> None:
        super().__init__()
        self.min_scale = min_scale
        self.scale_link = scale_link  # of s(h): softplus or exp (distributions.positive_scale)

    def prepare(self, features: Tensor, data: VariationalData) -> None:
        """Add what the prior mean needs per call to `data`."""

    @abstractmethod
    def around_gp(
        self, data: VariationalData, xi: Tensor, gp_mean: Tensor, gp_variance: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead, 1 or d_f]` of f given the GP's moments."""

    def prepare_linear_warp(self, data: VariationalData) -> None:
        """Add what the linear warp needs per call to `data`."""

    @abstractmethod
    def linear_mean(self, data: VariationalData, xi: Tensor) -> Tensor:
        """E[f | xi] `[*lead, d_f]` of the linear warp (no GP)."""

    def inverse(
        self, data: VariationalData, z: Tensor, kernel: ARDKernel | None
    ) -> Gaussian | None:
        """The posterior of xi given z under the linear part of the warp, or None."""
        return None


class ZeroPriorMean(PriorMean):
    """f = g(xi), the paper's GP (`prior_mean=zero`); its linear warp is the least-squares
    affine fit of T on S, what a linear-kernel GP interpolates."""

    def around_gp(
        self, data: VariationalData, xi: Tensor, gp_mean: Tensor, gp_variance: Tensor
    ) -> tuple[Tensor, Tensor]:
        return gp_mean, gp_variance

    def prepare_linear_warp(self, data: VariationalData) -> None:
        data.affine = affine_projector(data.inputs)  # P: [c + 1, M] or [*batch, c + 1, M]

    def linear_mean(self, data: VariationalData, xi: Tensor) -> Tensor:
        assert data.affine is not None
        return data.outputs.mean(affine_weights(data.affine, xi))  # [*lead, d_f]


class IdentityPriorMean(PriorMean):
    """f = m(h) + s(h) g(xi) with g ~ GP(xi, k) on (S, T(h)) (`prior_mean=identity`, Eq. 4
    around a linear prior mean): E[f | xi] = m(h) + s(h) (xi + w(xi)^T T(h)) and
    Var[f_j | xi] = s_j(h)^2 v(xi). With T = 0 this is the mean-field family, where it starts."""

    starts_mean_field = True

    def __init__(
        self, features: int, z_dim: int, min_scale: float, scale_link: str = "softplus"
    ) -> None:
        super().__init__(features, z_dim, min_scale, scale_link)
        self.location_net = nn.Linear(features, z_dim)  # m(h)
        self.warp_scale_net = nn.Linear(features, z_dim)  # s(h), before its link

    def prepare(self, features: Tensor, data: VariationalData) -> None:
        data.location = self.location_net(features)  # [*batch, D]
        raw_scale = self.warp_scale_net(features)
        data.warp_scale = positive_scale(raw_scale, self.min_scale, self.scale_link)

    def around_gp(
        self, data: VariationalData, xi: Tensor, gp_mean: Tensor, gp_variance: Tensor
    ) -> tuple[Tensor, Tensor]:
        assert data.location is not None and data.warp_scale is not None
        warped = data.location + data.warp_scale * (xi + gp_mean)  # m + s (xi + w^T T)
        return warped, data.warp_scale.pow(2) * gp_variance

    def linear_mean(self, data: VariationalData, xi: Tensor) -> Tensor:
        assert data.location is not None and data.warp_scale is not None
        return data.location + data.warp_scale * xi  # [*lead, D]

    def inverse(
        self, data: VariationalData, z: Tensor, kernel: ARDKernel | None
    ) -> Gaussian | None:
        """With z = m + s xi + tau eps per dimension, xi | z ~ N(s (z - m) / (s^2 + tau^2),
        tau^2 / (s^2 + tau^2)); tau^2 = sigma^2 + s^2 sigma^2_ard (the GP's `kernel`; None for
        the linear warp) bounds the noise from above."""
        if data.location is None or data.warp_scale is None or data.scale is None:
            return None
        warp_variance = data.warp_scale.pow(2)
        noise_variance = data.scale.pow(2)
        if kernel is not None:
            noise_variance = noise_variance + warp_variance * kernel.variance
        total = warp_variance + noise_variance
        return data.warp_scale * (z - data.location) / total, (noise_variance / total).sqrt()


class Warp(ABC):
    """How E[f | xi] and Var[f | xi] come from xi: through the GP, or without it."""

    uses_gp = True  # the GP's variance adds to the noise of the linear part

    @abstractmethod
    def prepare(self, data: VariationalData, prior_mean: PriorMean) -> None:
        """Add what the warp needs per call to `data`."""

    @abstractmethod
    def f_mean_variance(
        self, data: VariationalData, xi: Tensor, prior_mean: PriorMean, gp_moments: GPMoments
    ) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead, 1 or d_f]` of q(f | xi)."""


class GPWarp(Warp):
    """The family (`warp=gp`): f is the prior mean around the GP g(xi) | (S, T) (Eq. 4)."""

    def prepare(self, data: VariationalData, prior_mean: PriorMean) -> None:
        pass  # the GP's factor and outputs are in the data already

    def f_mean_variance(
        self, data: VariationalData, xi: Tensor, prior_mean: PriorMean, gp_moments: GPMoments
    ) -> tuple[Tensor, Tensor]:
        gp_mean, gp_variance = gp_moments(data, xi)
        return prior_mean.around_gp(data, xi, gp_mean, gp_variance.unsqueeze(-1))  # var [*, 1]


class LinearWarp(Warp):
    """The control with the GP taken out (`warp=linear`): E[f | xi] is the prior mean's linear
    warp, m + s xi or the affine fit of (S, T), and Var[f | xi] = 0."""

    uses_gp = False

    def prepare(self, data: VariationalData, prior_mean: PriorMean) -> None:
        prior_mean.prepare_linear_warp(data)

    def f_mean_variance(
        self, data: VariationalData, xi: Tensor, prior_mean: PriorMean, gp_moments: GPMoments
    ) -> tuple[Tensor, Tensor]:
        linear = prior_mean.linear_mean(data, xi)
        return linear, torch.zeros_like(linear[..., :1])


class MeanFieldScale(nn.Module):
    """sigma(h) of q(z | f) = N(f, diag(sigma^2)); None in the data when the GP makes it."""

    gp_outputs_per_latent = 1  # d_f = this x d

    def __init__(
        self,
        features: int,
        z_dim: int,
        noise_ratio: float,
        min_scale: float,
        scale_link: str = "softplus",
    ) -> None:
        super().__init__()
        self.min_scale = min_scale
        self.noise_ratio = float(noise_ratio)  # sigma / s(h), read by the tied scale
        self.scale_link = scale_link  # of a sigma(h) made from the features

    def from_features(self, features: Tensor) -> Tensor | None:
        """sigma `[*batch, D]` made before the prior mean's part, or None."""
        return None

    def after_prior_mean(self, data: VariationalData) -> None:
        """Set `data.scale` from what the prior mean added, where the scale is tied to it."""

    def start_at(self, noise_scale: float) -> None:
        """sigma = `noise_scale` whatever h, where the part makes sigma itself."""


class ContextScale(MeanFieldScale):
    """sigma(h) from the features (`mean_field_scale=context`)."""

    def __init__(
        self,
        features: int,
        z_dim: int,
        noise_ratio: float,
        min_scale: float,
        scale_link: str = "softplus",
    ) -> None:
        super().__init__(features, z_dim, noise_ratio, min_scale, scale_link)
        self.scale_net = nn.Linear(features, z_dim)

    def from_features(self, features: Tensor) -> Tensor:
        raw_scale = self.scale_net(features)
        return positive_scale(raw_scale, self.min_scale, self.scale_link)  # [*batch, D]

    def start_at(self, noise_scale: float) -> None:
        with torch.no_grad():
            self.scale_net.weight.zero_()
            raw = noise_scale - self.min_scale
            inverse_link = (
                math.log(raw) if self.scale_link == "exp" else raw + math.log(-math.expm1(-raw))
            )  # exp^-1 or softplus^-1
            self.scale_net.bias.fill_(inverse_link)


class GPScale(MeanFieldScale):
    """sigma from the GP (`mean_field_scale=gp`): f has d_f = 2d values, the mean and the
    pre-softplus scale of z (a non-Gaussian z | xi: not for the collapsed objective)."""

    gp_outputs_per_latent = 2


class TiedScale(MeanFieldScale):
    """sigma = `noise_ratio` s(h) (`mean_field_scale=tied`, identity prior mean): the spread of
    z always passes through xi, so the VGP cannot become a mean-field Gaussian by moving the
    variance from s(h) to sigma(h)."""

    def after_prior_mean(self, data: VariationalData) -> None:
        assert data.warp_scale is not None, "mean_field_scale=tied needs prior_mean=identity"
        data.scale = self.noise_ratio * data.warp_scale


PRIOR_MEANS: dict[str, type[PriorMean]] = {"zero": ZeroPriorMean, "identity": IdentityPriorMean}
WARPS: dict[str, type[Warp]] = {"gp": GPWarp, "linear": LinearWarp}
MEAN_FIELD_SCALES: dict[str, type[MeanFieldScale]] = {
    "context": ContextScale,
    "gp": GPScale,
    "tied": TiedScale,
}
