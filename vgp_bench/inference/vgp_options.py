"""The VGP's options: their defaults (`VGPOptions`), the part each name chooses, and the
combinations refused.

Every choice (`inference.inputs`, `outputs`, `prior_mean`, `mean_field_scale`, `warp`,
`aux_correction`, `objective`, `paper_auxiliary`) is a registry, a dict from the name to what
it selects, next to the parts it holds; `choose` is their one check and error message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from vgp_bench.errors import ConfigError
from vgp_bench.inference.base import SiteSpec

Choice = TypeVar("Choice")


@dataclass(frozen=True)
class VGPOptions:
    """VGPHead's options and their defaults, declared once: VGPHead's keyword defaults are these,
    and configs/inference/vgp.yaml states the same values (a test holds them equal); the comments
    there say what each option does."""

    variational_data_size: int = 500
    latent_input_dim: int | None = None
    inputs: str = "global"
    outputs: str = "global"
    outputs_rank: int = 32
    objective: str = "collapsed"
    aux_samples: int = 0
    mean_field_scale: str = "tied"
    noise_ratio: float = 0.1
    prior_mean: str = "identity"
    paper_auxiliary: str = "factorized"
    warp: str = "gp"
    aux_correction: str = "learned"
    hidden_dims: tuple[int, ...] = ()
    aux_hidden_dims: tuple[int, ...] = (256,)
    activation: str = "tanh"
    min_scale: float = 1e-4
    kernel_variance: float = 0.01
    kernel_inverse_lengthscale: float | None = None
    init_output_spread: float = 0.1
    init_noise_scale: float = 0.1
    jitter: float = 1e-6
    max_jitter: float = 1e-2
    scale_link: str = "softplus"
    init: str = "default"


DEFAULTS = VGPOptions()


def choose(key: str, name: str, choices: Mapping[str, Choice]) -> Choice:
    """The part `name` selects among `choices` of the config key `key`, or a ConfigError that
    lists them."""
    if name not in choices:
        raise ConfigError(f"{key} must be one of {list(choices)}, got {name!r}")
    return choices[name]


def refuse_combinations(
    spec: SiteSpec,
    *,
    variational_data_size: int,
    latent_input_dim: int | None,
    outputs_rank: int,
    objective: str,
    aux_samples: int,
    mean_field_scale: str,
    noise_ratio: float,
    prior_mean: str,
    warp: str,
    aux_correction: str,
    min_scale: float,
    init_noise_scale: float,
) -> None:
    """Raise a ConfigError naming the keys for options that do not work together."""
    if aux_correction == "none" and (prior_mean != "identity" or mean_field_scale == "gp"):
        raise ConfigError(
            "inference.aux_correction=none (r fixed at the inverse of the linear warp) needs "
            "prior_mean=identity and mean_field_scale=context or tied; use learned"
        )
    if warp == "linear" and prior_mean == "zero" and mean_field_scale == "gp":
        raise ConfigError(
            "inference.warp=linear under the zero prior mean needs mean_field_scale=context: "
            "the affine fit has no GP to make the scale"
        )
    if aux_samples < 0 or variational_data_size < 1 or outputs_rank < 1:
        raise ConfigError(
            "inference.aux_samples must be >= 0, variational_data_size and outputs_rank >= 1"
        )
    if aux_samples > 0 and objective == "paper":
        raise ConfigError(
            "inference.aux_samples > 0 needs objective=collapsed or hierarchical: the paper "
            "objective integrates f analytically and has no importance-weighted form"
        )
    if objective == "paper" and mean_field_scale == "gp":
        raise ConfigError(
            "objective=paper is evaluated by the collapsed weight, which needs a Gaussian "
            "z | xi that a GP-made scale breaks; use objective=hierarchical with "
            "inference.mean_field_scale=gp"
        )
    if warp == "linear" and objective != "collapsed":
        raise ConfigError(
            "inference.warp=linear needs objective=collapsed: the linear warp has no GP noise "
            "(Var[f | xi] = 0), so the hierarchical and paper objectives' log q(f | xi) is "
            "not finite"
        )
    if objective == "collapsed" and mean_field_scale == "gp":
        raise ConfigError(
            "objective=collapsed needs a Gaussian z | xi, which a GP-made scale breaks; "
            "use objective=hierarchical with inference.mean_field_scale=gp"
        )
    c_given = int(latent_input_dim or spec.z_dim)
    if prior_mean == "identity" and (mean_field_scale == "gp" or c_given != spec.z_dim):
        raise ConfigError(
            "inference.prior_mean=identity needs latent_input_dim = d (null) and "
            "mean_field_scale=context or tied; use prior_mean=zero for other shapes"
        )
    if mean_field_scale == "tied" and (prior_mean != "identity" or noise_ratio <= 0):
        raise ConfigError(
            "inference.mean_field_scale=tied needs prior_mean=identity and noise_ratio > 0"
        )
    if init_noise_scale <= min_scale:
        raise ConfigError(f"inference.init_noise_scale must exceed min_scale {min_scale}")
