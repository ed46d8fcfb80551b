"""Unnormalized 2-D target densities with known log normalizers, for black-box fitting."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from torch import Tensor

from vgp_bench.errors import ConfigError

LOG_2PI = math.log(2.0 * math.pi)

PlotRange = tuple[tuple[float, float], tuple[float, float]]


class Target(ABC):
    """An unnormalized density p~(z) on R^2 with Z = int p~(z) dz known (in closed form or
    by an accurate 1-D quadrature), and a box that holds nearly all of its mass for plots."""

    name: str
    dim: int = 2
    log_normalizer: float
    plot_range: PlotRange

    @abstractmethod
    def log_density(self, z: Tensor) -> Tensor:
        """log p~(z) for z `[n, 2]`, returns `[n]`."""

    def __call__(self, z: Tensor) -> Tensor:
        return self.log_density(z)

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}(name={self.name!r}, log_normalizer={self.log_normalizer:.6f})"


def _check_points(z: Tensor) -> None:
    if z.dim() != 2 or z.shape[1] != 2:
        raise ConfigError(f"a 2-D target takes points of shape [n, 2], got {tuple(z.shape)}")


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ConfigError(f"{name} must be > 0, got {value}")


class CorrelatedGaussian(Target):
    """p~(z) = exp(-z^T Sigma^-1 z / 2) with unit variances and correlation rho;
    log Z = log 2 pi + log det(Sigma) / 2, det(Sigma) = 1 - rho^2."""

    def __init__(self, rho: float = 0.95) -> None:
        if not -1.0 < rho < 1.0:
            raise ConfigError(f"rho must lie strictly between -1 and 1, got {rho}")
        self.name = f"correlated(rho={rho:g})"
        self.rho = rho
        self.log_normalizer = LOG_2PI + 0.5 * math.log1p(-(rho**2))
        self.plot_range = ((-3.5, 3.5), (-3.5, 3.5))

    def log_density(self, z: Tensor) -> Tensor:
        _check_points(z)
        z1, z2 = z[:, 0], z[:, 1]
        quadratic = (z1.pow(2) - 2.0 * self.rho * z1 * z2 + z2.pow(2)) / (1.0 - self.rho**2)
        return -0.5 * quadratic  # [n]


class Banana(Target):
    """A Gaussian warped along a parabola: u = (z1, z2 - curvature (z1^2 - width^2)),
    p~(z) = exp(-(u1/width)^2/2 - (u2/thickness)^2/2). The warp is a shear with unit Jacobian,
    so log Z = log(2 pi width thickness)."""

    def __init__(self, curvature: float = 0.4, width: float = 1.5, thickness: float = 0.5) -> None:
        _check_positive(width=width, thickness=thickness)
        self.name = "banana"
        self.curvature = curvature
        self.width = width
        self.thickness = thickness
        self.log_normalizer = LOG_2PI + math.log(width) + math.log(thickness)
        half = 3.4 * width
        low = -abs(curvature) * width**2 - 3.0 * thickness
        high = abs(curvature) * (half**2 - width**2) * 0.85
        if curvature < 0:
            low, high = -high, -low
        self.plot_range = ((-half, half), (low, high))

    def log_density(self, z: Tensor) -> Tensor:
        _check_points(z)
        z1, z2 = z[:, 0], z[:, 1]
        warped = z2 - self.curvature * (z1.pow(2) - self.width**2)
        return -0.5 * ((z1 / self.width).pow(2) + (warped / self.thickness).pow(2))  # [n]


class Mixture(Target):
    """p~(z) = sum_k w_k exp(-|z - mu_k|^2 / (2 scale^2)) (isotropic components, weights
    summing to 1); log Z = log(2 pi scale^2)."""

    def __init__(
        self,
        means: Sequence[Sequence[float]] = ((-4.0, 0.0), (4.0, 0.0)),
        scale: float = 1.0,
        weights: Sequence[float] | None = None,
    ) -> None:
        _check_positive(scale=scale)
        self.means = torch.tensor([list(mean) for mean in means], dtype=torch.float64)  # [K, 2]
        if self.means.dim() != 2 or self.means.shape[1] != 2 or self.means.shape[0] < 1:
            raise ConfigError(f"means must be a list of K >= 1 points in 2-D, got {means}")
        count = self.means.shape[0]
        weights = [1.0 / count] * count if weights is None else list(weights)
        if len(weights) != count or min(weights) <= 0:
            raise ConfigError(f"weights must be {count} positive numbers, got {weights}")
        total = sum(weights)
        self.log_weights = torch.tensor([math.log(w / total) for w in weights], dtype=torch.float64)
        self.scale = scale
        self.name = f"mixture({count} modes)"
        self.log_normalizer = LOG_2PI + 2.0 * math.log(scale)
        margin = 3.5 * scale
        low = self.means.min(0).values - margin
        high = self.means.max(0).values + margin
        center = (low + high) / 2
        half = float((high - low).max()) / 2  # square box, so the picture keeps its aspect
        self.plot_range = (
            (float(center[0]) - half, float(center[0]) + half),
            (float(center[1]) - half, float(center[1]) + half),
        )

    def log_density(self, z: Tensor) -> Tensor:
        _check_points(z)
        means = self.means.to(z)  # [K, 2]
        squared = (z.unsqueeze(1) - means).pow(2).sum(-1)  # [n, K]
        component = self.log_weights.to(z) - 0.5 * squared / self.scale**2  # [n, K]
        return torch.logsumexp(component, dim=1)  # [n]


class Funnel(Target):
    """Neal's funnel in 2-D, z = (v, x): p~(z) = exp(-v^2 / (2 scale^2)) exp(-x^2 e^-v / 2).
    Integrating x gives sqrt(2 pi) e^(v/2); then v gives sqrt(2 pi scale^2) e^(scale^2/8), so
    log Z = log 2 pi + log scale + scale^2 / 8."""

    def __init__(self, scale: float = 3.0) -> None:
        _check_positive(scale=scale)
        self.name = "funnel"
        self.scale = scale
        self.log_normalizer = LOG_2PI + math.log(scale) + scale**2 / 8.0
        self.plot_range = ((-2.5 * scale, 2.5 * scale), (-3.0 * scale, 3.0 * scale))

    def log_density(self, z: Tensor) -> Tensor:
        _check_points(z)
        v, x = z[:, 0], z[:, 1]
        return -0.5 * (v / self.scale).pow(2) - 0.5 * x.pow(2) * torch.exp(-v)  # [n]


class Ring(Target):
    """A radial Gaussian around a circle: p~(z) = exp(-(|z| - radius)^2 / (2 width^2)).
    Z = int_0^inf 2 pi r exp(-(r - radius)^2 / (2 width^2)) dr, by composite Simpson in float64."""

    def __init__(self, radius: float = 2.5, width: float = 0.35) -> None:
        _check_positive(radius=radius, width=width)
        self.name = "ring"
        self.radius = radius
        self.width = width
        self.log_normalizer = math.log(ring_normalizer(radius, width))
        half = radius + 4.0 * width
        self.plot_range = ((-half, half), (-half, half))

    def log_density(self, z: Tensor) -> Tensor:
        _check_points(z)
        radial = torch.linalg.vector_norm(z, dim=1)  # [n]
        return -0.5 * ((radial - self.radius) / self.width).pow(2)


def ring_normalizer(radius: float, width: float, intervals: int = 200_000) -> float:
    """int_0^inf 2 pi r exp(-(r - radius)^2 / (2 width^2)) dr by Simpson's rule on
    [0, radius + 40 width] (the tail beyond is below e^-800)."""
    upper = radius + 40.0 * width
    r = torch.linspace(0.0, upper, 2 * intervals + 1, dtype=torch.float64)
    integrand = 2.0 * math.pi * r * torch.exp(-0.5 * ((r - radius) / width).pow(2))
    simpson_weights = torch.ones_like(r)
    simpson_weights[1:-1:2] = 4.0
    simpson_weights[2:-1:2] = 2.0
    step = upper / (2 * intervals)
    return float((simpson_weights * integrand).sum() * step / 3.0)


TARGETS: dict[str, type[Target]] = {
    "banana": Banana,
    "mixture": Mixture,
    "funnel": Funnel,
    "ring": Ring,
    "correlated": CorrelatedGaussian,
}
