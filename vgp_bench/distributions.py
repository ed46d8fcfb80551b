"""Log densities as small pure functions, summed over the last dimension."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from vgp_bench.errors import ConfigError

LOG_2PI = math.log(2.0 * math.pi)


def normal_log_prob(x: Tensor, mean: Tensor, scale: Tensor) -> Tensor:
    """log N(x; mean, diag(scale^2)), summed over the last dimension."""
    standardized = (x - mean) / scale
    return -0.5 * (standardized.pow(2) + LOG_2PI).sum(-1) - torch.log(scale).sum(-1)


def standard_normal_log_prob(x: Tensor) -> Tensor:
    """log N(x; 0, I), summed over the last dimension."""
    return -0.5 * (x.pow(2) + LOG_2PI).sum(-1)


def normal_kl(mean_q: Tensor, scale_q: Tensor, mean_p: Tensor, scale_p: Tensor) -> Tensor:
    """KL(N(mean_q, scale_q^2) || N(mean_p, scale_p^2)) for diagonal Gaussians, summed (App. C)."""
    variance_ratio = (scale_q / scale_p).pow(2)
    mean_term = ((mean_q - mean_p) / scale_p).pow(2)
    return 0.5 * (variance_ratio + mean_term - 1.0 - torch.log(variance_ratio)).sum(-1)


SCALE_LINKS = ("softplus", "exp")


def positive_scale(raw: Tensor, minimum: float = 1e-4, link: str = "softplus") -> Tensor:
    """Map an unconstrained network output to a positive scale: softplus (or exp, as Burda et
    al. 2016 do) plus a floor."""
    return (torch.exp(raw) if link == "exp" else F.softplus(raw)) + minimum


def check_scale_link(link: str, key: str) -> None:
    """Refuse a scale link other than softplus or exp, naming the config key."""
    if link not in SCALE_LINKS:
        raise ConfigError(f"{key} must be {' or '.join(SCALE_LINKS)}, got {link!r}")


def bernoulli_log_prob(logits: Tensor, x: Tensor) -> Tensor:
    """log Bernoulli(x; sigmoid(logits)), summed over the last dimension; x must be in {0, 1}.

    x l - softplus(l) per pixel: the value of binary cross-entropy with logits in two passes
    over the logits instead of four (it dominates importance-sampled evaluation).
    """
    return (logits * x).sum(-1) - F.softplus(logits).sum(-1)


def check_binary(x: Tensor) -> None:
    """Refuse inputs outside {0, 1}: a Bernoulli likelihood on grey levels inflates the numbers.

    On CUDA the check is asynchronous (no host sync); on CPU it is immediate.
    """
    is_binary = ~(x * (1 - x)).any()  # x (1 - x) = 0 exactly when x is 0 or 1
    message = (
        "Bernoulli likelihood got non-binary input; binarize the data "
        "(dataset.binarization=fixed|dynamic) instead of passing grey levels"
    )
    if x.is_cuda:
        torch._assert_async(is_binary, message)
    elif not bool(is_binary):
        raise ValueError(message)
