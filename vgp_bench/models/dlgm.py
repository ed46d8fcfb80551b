"""The deep latent Gaussian model (Rezende et al. 2014) with L stochastic layers (Section 5.1)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from vgp_bench.distributions import (
    bernoulli_log_prob,
    check_binary,
    check_scale_link,
    normal_log_prob,
    positive_scale,
    standard_normal_log_prob,
)
from vgp_bench.errors import ConfigError
from vgp_bench.inference.base import SiteSample, SiteSpec
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.nets import initialize, mlp, output_dim
from vgp_bench.trace import Trace

OUTPUT_BIAS_STARTS = ("zero", "train_mean")
OUTPUT_BIAS_CLIP = (0.001, 0.999)  # the training mean's range for its logits (Burda et al.)


class DLGM(LatentVariableModel):
    """p(x, z_1..L) = Bernoulli(x | g(z_1)) prod_l N(z_l | mu_l(z_{l+1}), sigma_l(z_{l+1})^2).

    `latent_dims[l]` is the size of z_{l+1}; `hidden_dims[l]` the deterministic layers between
    layer l (x for l = 0) and z_{l+1}, used top-down by p and bottom-up by the recognition
    features. All latents form one site `z` (d = sum(latent_dims)), so a variational family
    covers them jointly; its context is the concatenated bottom-up features of x. Being the
    only site, it offers the head log p(x, z) as a function of z (`SiteSpec.offers_log_joint`).
    """

    def __init__(
        self,
        x_shape: tuple[int, int, int],
        latent_dims: Sequence[int] = (50,),
        hidden_dims: Sequence[Sequence[int]] = ((200, 200),),
        activation: str = "tanh",
        min_scale: float = 1e-4,
        scale_link: str = "softplus",
        init: str = "default",
        output_bias: str = "zero",
    ) -> None:
        super().__init__(x_shape)
        check_scale_link(scale_link, "model.scale_link")
        if output_bias not in OUTPUT_BIAS_STARTS:
            raise ConfigError(
                f"model.output_bias must be {' or '.join(OUTPUT_BIAS_STARTS)}, got {output_bias!r}"
            )
        self.scale_link = scale_link
        self.output_bias = output_bias
        if len(latent_dims) != len(hidden_dims) or not latent_dims:
            raise ConfigError(
                f"model.latent_dims ({list(latent_dims)}) and model.hidden_dims "
                f"({[list(h) for h in hidden_dims]}) need one entry per stochastic layer"
            )
        self.latent_dims = [int(d) for d in latent_dims]
        self.min_scale = min_scale
        pixels = math.prod(self.x_shape)
        below = [pixels, *self.latent_dims[:-1]]  # the layer under each z_l
        # bottom-up recognition features, one stack per stochastic layer
        self.feature_stacks = nn.ModuleList()
        width = pixels
        for hidden in hidden_dims:
            self.feature_stacks.append(mlp(width, hidden, activation=activation))
            width = output_dim(width, hidden)
        context_dim = self._context_dim(pixels, hidden_dims)
        # top-down generative networks: z_1 -> x logits, z_{l+1} -> (mu_l, raw sigma_l)
        self.likelihood_net = mlp(self.latent_dims[0], hidden_dims[0], pixels, activation)
        self.conditional_nets = nn.ModuleList(
            mlp(
                self.latent_dims[layer + 1],
                hidden_dims[layer + 1],
                2 * below[layer + 1],
                activation,
            )
            for layer in range(len(self.latent_dims) - 1)
        )
        initialize(self, init, "model.init")
        self.sites = {
            "z": SiteSpec(
                context_dim=context_dim, z_dim=sum(self.latent_dims), offers_log_joint=True
            )
        }

    @staticmethod
    def _context_dim(pixels: int, hidden_dims: Sequence[Sequence[int]]) -> int:
        total, width = 0, pixels
        for hidden in hidden_dims:
            width = output_dim(width, hidden)
            total += width
        return total

    def start_from_data(self, pixel_means: Tensor) -> None:
        """`output_bias=train_mean`: the output layer's bias starts at the logits of the
        training mean, clipped to [0.001, 0.999] (Burda et al. 2016); `zero` changes nothing."""
        if self.output_bias == "train_mean":
            logits = torch.logit(pixel_means.flatten().clamp(*OUTPUT_BIAS_CLIP))  # [P]
            with torch.no_grad():
                self.likelihood_net[-1].bias.copy_(logits)

    def latent_groups(self, site: str) -> dict[str, int]:
        """The stochastic layers of the joint site: z1 (next to x), z2, ..."""
        return {f"z{layer + 1}": size for layer, size in enumerate(self.latent_dims)}

    def recognition_context(self, x: Tensor) -> Tensor:
        """Concatenated bottom-up features of x, `[B, C]`."""
        features, hidden = [], x.flatten(1)
        for stack in self.feature_stacks:
            hidden = stack(hidden)
            features.append(hidden)
        return features[0] if len(features) == 1 else torch.cat(features, dim=-1)

    def log_prior(self, latents: Sequence[Tensor]) -> Tensor:
        """log p(z_L) + sum_l log p(z_l | z_{l+1}), `[S, B]`."""
        total = standard_normal_log_prob(latents[-1])
        for layer, net in enumerate(self.conditional_nets):
            mean, raw_scale = net(latents[layer + 1]).chunk(2, dim=-1)
            total = total + normal_log_prob(
                latents[layer], mean, positive_scale(raw_scale, self.min_scale, self.scale_link)
            )
        return total

    def log_joint_terms(self, pixels: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """log p(x | z_1) and log p(z_1..L), each `[S, B]`, for x `[B, P]` and z `[S, B, D]`."""
        latents = z.split(self.latent_dims, dim=-1)  # each [S, B, d_l]
        log_likelihood = bernoulli_log_prob(self.likelihood_net(latents[0]), pixels)
        return log_likelihood, self.log_prior(latents)

    def draw_latents(
        self, x: Tensor, heads: nn.ModuleDict, n_samples: int, generator: torch.Generator | None
    ) -> SiteSample:
        """The head's draw of all latents for x, given log p(x, z) as a function of z."""
        pixels = x.flatten(1)  # [B, P]

        def log_joint(z: Tensor) -> Tensor:
            log_likelihood, log_prior = self.log_joint_terms(pixels, z)
            return log_likelihood + log_prior  # [S, B]

        context = self.recognition_context(x)
        return heads["z"](context, n_samples, generator, log_joint=log_joint)

    def log_weight_sampler(
        self, x: Tensor, heads: nn.ModuleDict
    ) -> Callable[[int, torch.Generator | None], Tensor]:
        """The input check, the recognition features and the head's per-example work once;
        then log w `[S, B]` chunk after chunk, the numbers `forward` gives per chunk."""
        if self.checks_inputs:
            check_binary(x)
        pixels = x.flatten(1)  # [B, P]

        def log_joint(z: Tensor) -> Tensor:
            log_likelihood, log_prior = self.log_joint_terms(pixels, z)
            return log_likelihood + log_prior  # [S, B]

        draw = heads["z"].sampler(self.recognition_context(x))

        def sample(n_samples: int, generator: torch.Generator | None = None) -> Tensor:
            site = draw(n_samples, generator, log_joint)
            return log_joint(site.z) - site.log_q  # [S, B]

        return sample

    def forward(
        self,
        x: Tensor,
        heads: nn.ModuleDict,
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> Trace:
        if self.checks_inputs:
            check_binary(x)
        site = self.draw_latents(x, heads, n_samples, generator)
        log_likelihood, log_prior = self.log_joint_terms(x.flatten(1), site.z)
        return Trace(
            log_p=log_likelihood + log_prior,
            log_q=site.log_q,
            terms={"log_likelihood": log_likelihood, "log_prior": log_prior, **site.terms},
            extras=site.site_extras("z"),
        )

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        device = self.likelihood_net[0].weight.device
        z = torch.randn(n, self.latent_dims[-1], generator=generator, device=device)
        for layer in reversed(range(len(self.conditional_nets))):
            mean, raw_scale = self.conditional_nets[layer](z).chunk(2, dim=-1)
            noise = torch.randn(mean.shape, generator=generator, device=device)
            z = mean + positive_scale(raw_scale, self.min_scale, self.scale_link) * noise
        return torch.sigmoid(self.likelihood_net(z)).reshape(n, *self.x_shape)

    def reconstruct(
        self, x: Tensor, heads: nn.ModuleDict, generator: torch.Generator | None = None
    ) -> Tensor:
        site = self.draw_latents(x, heads, 1, generator)
        z_bottom = site.z[0, :, : self.latent_dims[0]]  # [B, d_1]
        return torch.sigmoid(self.likelihood_net(z_bottom)).reshape(x.shape)
