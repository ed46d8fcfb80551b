"""Mean ± standard error over seeds, the one estimate of the report (vgp-report) and the
results READMEs (scripts/results_readme.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def mean_and_standard_error(
    values: Sequence[float], own_stderr: float | None = None
) -> tuple[float, float]:
    """The mean of `values` and its standard error, sd / sqrt(n) with the n - 1 denominator;
    a single value keeps `own_stderr` (a run's own, over its test images; NaN if it has none)."""
    if len(values) == 1:
        own = own_stderr
        finite = isinstance(own, int | float) and not isinstance(own, bool) and math.isfinite(own)
        return float(values[0]), float(own) if finite else math.nan
    if not values:
        raise ValueError("mean_and_standard_error: no values")
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
