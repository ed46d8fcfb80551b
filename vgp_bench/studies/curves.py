"""How runs' validation curves compare: the spread of their best bounds so far, a repeat of an
earlier run, where two early-stopped runs stood at each stop, and the gain before a stop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgp_bench.studies import runs
from vgp_bench.studies.cells import plural, signed


def best_gaps(study: str, names: Sequence[str], after: int) -> dict[int, float]:
    """The spread (max - min) of the runs' best validation bounds so far at each epoch after
    `after` that all of them have."""
    bests = [runs.best_so_far(study, run) for run in names]
    common = sorted(set.intersection(*(set(best) for best in bests)))
    return {e: max(b[e] for b in bests) - min(b[e] for b in bests) for e in common if e > after}


def lost_runs_agreement(study: str, lost: Sequence[str], after: int) -> tuple[int, float, float]:
    """(epochs all `lost` runs reached, largest gap of their best bounds so far after epoch
    `after`, largest gap of their bounds epoch by epoch)."""
    if len(lost) < 2:
        raise ValueError(f"{study}: fewer than two lost runs to compare: {list(lost)}")
    curves = [runs.valid_curve(study, run) for run in lost]
    common = sorted(set.intersection(*(set(curve) for curve in curves)))
    if not common or common != list(range(1, common[-1] + 1)) or common[-1] <= after:
        raise ValueError(
            f"{study}: the lost runs {list(lost)} share no epochs 1..E with E > {after}"
        )
    best_gap = max(best_gaps(study, lost, after).values())
    epoch_gap = max(max(c[e] for c in curves) - min(c[e] for c in curves) for e in common)
    return common[-1], best_gap, epoch_gap


def repeat_of(study: str, run: str, other: str) -> str:
    """How a run's validation curve compares with an earlier run's of the same protocol and
    seed over the epochs both have, in words: exactly, or within the largest gap."""
    curves = [runs.valid_curve(study, name) for name in (run, other)]
    common = sorted(set(curves[0]) & set(curves[1]))
    if not common:
        return f"has no epoch in common with `{other}` yet"
    gap = max(abs(curves[0][e] - curves[1][e]) for e in common)
    if gap == 0:
        return (
            f"repeats `{other}`'s validation bound exactly, to the last digit, at each of the "
            f"{len(common)} epochs both have"
        )
    return (
        f"differs from `{other}`'s validation bound by at most {gap:.2f} nats over the "
        f"{len(common)} epochs both have"
    )


def lead_at_stops(study: str, run: str, other: str, names: tuple[str, str]) -> str:
    """`other`'s best validation bound minus `run`'s, both stopped by the early stopping and
    `run` at an earlier epoch: at `run`'s last epoch (equal epochs) and at `other`'s (the
    stops), the second part what came with the epochs only `other` trained. `names` say the
    two runs in words."""
    records = [runs.load(study, name) for name in (run, other)]
    if any(r.get("stop_reason") != "early_stopping" for r in records):
        raise ValueError(f"{study}: {run} and {other} are not both stopped by early stopping")
    mine, theirs = runs.best_so_far(study, run), runs.best_so_far(study, other)
    stop, their_stop = max(mine), max(theirs)
    if their_stop <= stop:
        raise ValueError(f"{study}: {other} did not stop after {run} (epochs {their_stop}, {stop})")
    theirs_at_stop = theirs[max(epoch for epoch in theirs if epoch <= stop)]
    equal = round(theirs_at_stop - mine[stop], 2)  # rounded so that the parts add up as shown
    final = round(theirs[their_stop] - mine[stop], 2)
    return (
        f"at {names[0]}'s last epoch, {stop}, {names[1]}'s best validation bound was "
        f"{theirs_at_stop:.2f} against {names[0]}'s {mine[stop]:.2f} ({signed(equal)} nats); "
        f"{names[1]} trained {plural(their_stop - stop, 'epoch')} more, to "
        f"{theirs[their_stop]:.2f} at its stop ({signed(final)} against {names[0]}'s best): of "
        f"{names[1]}'s best minus {names[0]}'s at the stops, {signed(equal)} nats were there at "
        f"equal epochs and {signed(final - equal)} came with the epochs only {names[1]} trained"
    )


def realization_gap(study: str, run: str, other: str, after: int) -> str:
    """The range of the gaps between two realizations' best validation bounds so far over the
    epochs after `after` both have, in words."""
    gaps = best_gaps(study, (run, other), after)
    if not gaps:
        raise ValueError(f"{study}: {run} and {other} share no epoch after {after}")
    return (
        f"{min(gaps.values()):.2f} to {max(gaps.values()):.2f} nats over epochs {min(gaps)} to "
        f"{max(gaps)}"
    )


def last_window_gain(metrics: dict[str, Any], window: int) -> float | None:
    """How much a run's best validation bound gained over its last `window` epochs (None for
    a run of `window` epochs or fewer)."""
    bounds = [entry["valid_bound"] for entry in metrics["history"]]  # one per epoch, in order
    if len(bounds) <= window:
        return None
    return max(bounds) - max(bounds[:-window])
