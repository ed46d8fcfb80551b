"""How far a standard deviation estimated from a few seeds is known: the chi-square
distribution's quantiles and the confidence interval they give."""

from __future__ import annotations

import math


def chi_square_cdf(x: float, dof: int) -> float:
    """P(X <= x) for X chi-square with `dof` degrees of freedom: the regularised lower
    incomplete gamma function P(dof / 2, x / 2), by its power series."""
    if x <= 0:
        return 0.0
    shape, half = dof / 2, x / 2
    term = total = 1 / shape
    n = 0
    while term > 1e-16 * total:
        n += 1
        term *= half / (shape + n)
        total += term
    return min(1.0, math.exp(shape * math.log(half) - half - math.lgamma(shape)) * total)


def chi_square_quantile(probability: float, dof: int) -> float:
    """The x with P(X <= x) = `probability` for X chi-square with `dof` degrees of freedom."""
    low, high = 0.0, float(dof)
    while chi_square_cdf(high, dof) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if chi_square_cdf(middle, dof) < probability else (low, middle)
    return (low + high) / 2


def deviation_interval(seeds: int, level: float = 0.95) -> tuple[float, float]:
    """The `level` confidence interval of a normal standard deviation estimated from `seeds`
    values, as factors of the estimate: sqrt(dof / chi-square quantiles), dof = seeds - 1."""
    dof, tail = seeds - 1, (1 - level) / 2
    upper, lower = chi_square_quantile(1 - tail, dof), chi_square_quantile(tail, dof)
    return math.sqrt(dof / upper), math.sqrt(dof / lower)
