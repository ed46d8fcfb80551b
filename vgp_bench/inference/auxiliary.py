"""The auxiliary model r(xi, f | x, z) of the VGP bound (Sections 3.1-3.2, Appendix C)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from vgp_bench.distributions import positive_scale
from vgp_bench.gp.kernels import inverse_softplus
from vgp_bench.nets import ACTIVATIONS, mlp

AUXILIARY_STRUCTURES = ("xi", "xi_then_f", "factorized")


class GaussianMLP(nn.Module):
    """N(mean, diag(scale^2)) with mean and scale from an MLP on [context, per-sample inputs].

    The first layer is split so the context part is computed once per example and broadcast
    over samples: a `[B, C]` (or `[S, B, C]`) context meets per-sample inputs `[*lead, k]`
    whose shape ends in the context's batch shape. The output layer starts at zero weights, so
    r starts at N(0, I) (for xi, the prior q(xi): the auxiliary terms start at zero).
    """

    def __init__(
        self,
        context_dim: int,
        sample_dim: int,
        out_dim: int,
        hidden_dims: Sequence[int] = (),
        activation: str = "tanh",
        min_scale: float = 1e-4,
    ) -> None:
        super().__init__()
        hidden_dims = [int(h) for h in hidden_dims]
        first = hidden_dims[0] if hidden_dims else 2 * out_dim
        self.context_layer = nn.Linear(context_dim, first)
        self.sample_layer = nn.Linear(sample_dim, first, bias=False)
        if hidden_dims:
            self.body: nn.Module = nn.Sequential(
                ACTIVATIONS[activation](), mlp(first, hidden_dims[1:], 2 * out_dim, activation)
            )
            output_layer = self.body[-1][-1]
        else:
            self.body = nn.Identity()
            output_layer = self.context_layer
        self.min_scale = min_scale
        with torch.no_grad():  # start at N(0, I) whatever the inputs (the prior q(xi) for xi)
            output_layer.weight.zero_()
            output_layer.bias[:out_dim] = 0.0
            output_layer.bias[out_dim:] = inverse_softplus(torch.tensor(1.0 - min_scale))
            if not hidden_dims:
                self.sample_layer.weight.zero_()

    def forward(self, context: Tensor, sample: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale, each `[*lead, out_dim]`."""
        context_part = self.context_layer(context)  # [B, H] or [S, B, H]
        hidden = self.sample_layer(sample) + context_part  # [*lead, H]
        mean, raw_scale = self.body(hidden).chunk(2, dim=-1)
        return mean, positive_scale(raw_scale, self.min_scale)


class AuxiliaryModel(nn.Module):
    """r over the VGP's latent input xi `[c]` and mapping value f `[d_f]`, given (x, z).

    `structure` says which factorization an objective needs:
    - `xi`: r(xi | x, z) only (the collapsed objective, f integrated out);
    - `xi_then_f`: r(xi | x, z) r(f | xi, x, z) (hierarchical: r of f sees xi);
    - `factorized`: r(xi | x, z) r(f | x, z) from one network on [h, z] with c + d_f means and
      scales, the fully factorized Gaussian of Section 3.2 (the paper objective).
    The context h stands for x: it is the site's context, e.g. the encoder's features.
    """

    def __init__(
        self,
        context_dim: int,
        z_dim: int,
        latent_input_dim: int,
        f_dim: int,
        structure: str = "xi",
        hidden_dims: Sequence[int] = (256,),
        activation: str = "tanh",
        min_scale: float = 1e-4,
    ) -> None:
        super().__init__()
        if structure not in AUXILIARY_STRUCTURES:
            raise ValueError(f"unknown auxiliary structure {structure!r}: {AUXILIARY_STRUCTURES}")
        self.structure = structure
        self.latent_input_dim = latent_input_dim
        if structure == "factorized":
            self.joint_net = GaussianMLP(
                context_dim, z_dim, latent_input_dim + f_dim, hidden_dims, activation, min_scale
            )
        else:
            self.xi_net = GaussianMLP(
                context_dim, z_dim, latent_input_dim, hidden_dims, activation, min_scale
            )
        if structure == "xi_then_f":
            self.f_net = GaussianMLP(
                context_dim, z_dim + latent_input_dim, f_dim, hidden_dims, activation, min_scale
            )

    def xi_given_z(
        self, context: Tensor, z: Tensor, base: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean and scale of r(xi | x, z), each `[*lead, c]`.

        With `base` (mean, scale) the network corrects a Gaussian the head already knows
        (the inverse of a linear warp): mean = base mean + net mean, scale = base scale * net
        scale, so that r starts at the base (the network's outputs start at 0 and 1).
        """
        if self.structure == "factorized":
            mean, scale = self.joint_net(context, z)
            mean, scale = mean[..., : self.latent_input_dim], scale[..., : self.latent_input_dim]
        else:
            mean, scale = self.xi_net(context, z)
        if base is None:
            return mean, scale
        return base[0] + mean, base[1] * scale

    def f_given_xi_z(self, context: Tensor, z: Tensor, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of r(f | xi, x, z) `[*lead, d_f]`; `factorized` ignores xi."""
        if self.structure == "factorized":
            mean, scale = self.joint_net(context, z)
            return mean[..., self.latent_input_dim :], scale[..., self.latent_input_dim :]
        if self.structure == "xi":
            raise RuntimeError("this auxiliary model has no r(f | .): build it with xi_then_f")
        z = z.expand(*xi.shape[:-1], z.shape[-1])
        return self.f_net(context, torch.cat([z, xi], dim=-1))


Gaussian = tuple[Tensor, Tensor]  # mean and scale, each [..., dim]


def learned_correction(
    auxiliary: AuxiliaryModel, context: Tensor, z: Tensor, inverse: Gaussian | None
) -> Gaussian:
    """r(xi | x, z) from r's network, correcting the inverse of the linear warp where there is
    one (`aux_correction=learned`)."""
    return auxiliary.xi_given_z(context, z, inverse)


def inverse_alone(
    auxiliary: AuxiliaryModel, context: Tensor, z: Tensor, inverse: Gaussian | None
) -> Gaussian:
    """r(xi | x, z) fixed at the inverse of the linear warp (`aux_correction=none`): a
    diagnostic that separates what learning r does to training from the family."""
    assert inverse is not None, "aux_correction=none needs the identity prior mean"
    return inverse


RCorrection = Callable[[AuxiliaryModel, Tensor, Tensor, Gaussian | None], Gaussian]
AUX_CORRECTIONS: dict[str, RCorrection] = {"learned": learned_correction, "none": inverse_alone}
