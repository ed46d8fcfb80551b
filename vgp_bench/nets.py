"""Small network builders shared by models and heads."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vgp_bench.errors import ConfigError

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def mlp(
    in_dim: int, hidden_dims: Sequence[int], out_dim: int | None = None, activation: str = "tanh"
) -> nn.Sequential:
    """Linear layers with `activation` after each hidden layer; no activation on the output."""
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in hidden_dims:
        layers += [nn.Linear(width, int(hidden)), ACTIVATIONS[activation]()]
        width = int(hidden)
    if out_dim is not None:
        layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def output_dim(in_dim: int, hidden_dims: Sequence[int]) -> int:
    """Width of an `mlp(in_dim, hidden_dims)` without an output layer."""
    return int(hidden_dims[-1]) if len(hidden_dims) else in_dim


INITIALIZATIONS = ("default", "glorot_uniform")


def initialize(module: nn.Module, scheme: str, key: str = "init") -> None:
    """Re-draw every linear layer of `module`: `default` keeps torch's initialisation;
    `glorot_uniform` draws weights from U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot &
    Bengio 2010), and zeroes the biases, as Burda et al. (2016) start their networks."""
    if scheme not in INITIALIZATIONS:
        raise ConfigError(f"{key} must be {' or '.join(INITIALIZATIONS)}, got {scheme!r}")
    if scheme == "default":
        return
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                if layer.bias is not None:
                    layer.bias.zero_()
