"""Small network builders shared by models and heads."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def mlp(
    in_dim: int, hidden_dims: Sequence[int], out_dim: int | None = None, activation: str = "tanh"
) -> nn.Sequential:
    """Linear layers with `activation` after each hidden layer; no activation on the output."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
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
