"""The report's "Where the bound goes" table: per row, the gap between the bound and the IS
estimate, the auxiliary model's share of it, how much z depends on the VGP's latent input,
and the reliability of the importance weights (docs/design.md, section 5.1)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from vgp_bench.analysis.report.rows import (
    MISSING,
    Estimate,
    Row,
    Setting,
    distinguishing_suffixes,
    estimate,
    format_estimate,
    format_seeds,
    method_label,
    record,
    sort_key,
)
from vgp_bench.analysis.report.runs import Run
from vgp_bench.analysis.report.tables import Table
from vgp_bench.divergence import is_finite_number


def mean_over_runs(values: Sequence[Any]) -> Estimate | None:
    """Mean ± standard error over the runs that recorded a quantity (None when none did)."""
    present = [float(value) for value in values if is_finite_number(value)]
    if not present:
        return None
    if len(present) == 1:
        return Estimate(present[0], math.nan, 1)
    return estimate(present, [None] * len(present))


def last_epoch_value(run: Run, key: str) -> Any:
    """`key` of the last history entry that has it (the warp statistics, per epoch)."""
    for entry in reversed(run.record.history or []):
        if key in entry.diagnostics:
            return entry.diagnostics[key]
    return None


GAP_COLUMNS: tuple[tuple[str, str, Callable[[Run], Any]], ...] = (
    ("bound - IS", "bound_gap", lambda run: run.test.bound_gap),
    ("aux gap", "aux_gap", lambda run: run.test.aux_gap),
    ("warp share", "warp_share", lambda run: last_epoch_value(run, "z/warp_share")),
    (
        "nonlinear share",
        "nonlinear_warp_share",
        lambda run: last_epoch_value(run, "z/nonlinear_warp_share"),
    ),
    ("warp rank", "warp_rank", lambda run: last_epoch_value(run, "z/warp_rank")),
    (
        "variance dispersion",
        "variance_dispersion",
        lambda run: last_epoch_value(run, "z/variance_dispersion"),
    ),
    (
        "total correlation",
        "total_correlation",
        lambda run: last_epoch_value(run, "z/total_correlation"),
    ),
    ("k̂ > 0.7", "pareto_k_above_0_7", lambda run: pareto_share(run)),
    ("mean k̂", "pareto_k_mean", lambda run: run.test.pareto_k_mean),
)


def pareto_share(run: Run) -> float | None:
    """The share of examples with k-hat > 0.7; None where k-hat was not computed (older
    records wrote 0.0 then, beside a null mean)."""
    test = run.test
    return None if test.pareto_k_mean is None else test.pareto_k_above_0_7


def gap_table(dataset: str, groups: dict[Setting, list[Run]]) -> Table | None:
    """Where the bound goes, per row: the gap to the IS estimate, the share of it that is the
    auxiliary model's, how much z depends on the VGP's latent input, and the reliability of
    the importance weights (docs/design.md, section 5.1). None when no run recorded any of it."""
    settings = sorted(groups, key=sort_key)
    suffixes = distinguishing_suffixes(settings, table2=False)
    rows = []
    for setting in settings:
        runs = groups[setting]
        label = method_label(setting, table2=False) + suffixes[setting]
        values = {key: mean_over_runs([read(run) for run in runs]) for _, key, read in GAP_COLUMNS}
        if all(value is None for value in values.values()):
            continue
        row = Row([label, format_seeds(runs)])
        for _, key, _ in GAP_COLUMNS:
            value = values[key]
            if value is None:
                row.cells.append(MISSING)
            elif key == "pareto_k_above_0_7":
                row.cells.append(f"{100 * value.mean:.1f}%")
            elif key == "warp_rank":
                row.cells.append(f"{value.mean:.0f}")
            elif key.endswith(("share", "dispersion", "correlation")):
                row.cells.append(f"{value.mean:.3g}")
            else:
                row.cells.append(format_estimate(value))
            if value is not None:
                row.records.append(
                    record(
                        f"gaps:{dataset}",
                        label,
                        setting,
                        runs,
                        quantity=key,
                        epoch="",
                        mean=value.mean,
                        stderr=value.stderr,
                        stderr_over="seeds" if value.n > 1 else "",
                        paper="",
                        difference="",
                    )
                )
        rows.append(row)
    if not rows:
        return None
    notes = [
        "Nats on the test set unless said otherwise. bound - IS: how far the bound lies below "
        "the IS estimate of log p(x), what a better q could gain. aux gap: the bound with "
        "eval.aux_gap_samples auxiliary samples minus the bound without, on the first "
        "eval.aux_gap_examples test images: what a better r could gain (VGP only).",
        "warp share: Var_xi E[z | xi] / E_xi Var(z | xi) over the latent input xi, averaged "
        "over dimensions and 100 validation images at the last epoch (0: the VGP is a "
        "mean-field Gaussian in disguise); nonlinear share: the same for the part no affine "
        "map of xi explains (an affine warp is itself mean-field); warp rank: the directions "
        "E[z | xi] moves in; variance dispersion: Var_xi Var(z | xi) / (E_xi Var(z | xi))^2, how "
        "much the spread of z changes with xi (a scale mixture even under an affine warp); "
        "total correlation: what dependence between the coordinates of z is worth to the "
        "entropy, in nats, from the warp's affine part (0: q(z | x) factorizes; runs older "
        "than the statistic show —).",
        "k̂ > 0.7: share of test images whose importance weights have a PSIS Pareto k-hat above "
        "0.7 (nearly infinite variance: their IS estimate is unreliable at this S); mean k̂ "
        "over images (Vehtari et al.; Yao et al. 2018).",
    ]
    headers = ["method", "seeds", *(title for title, _, _ in GAP_COLUMNS)]
    return Table(f"Where the bound goes: {dataset}", headers, rows, notes, f"gaps:{dataset}")
