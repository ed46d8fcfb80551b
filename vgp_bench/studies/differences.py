"""Differences between a study's rows: of the test means over seeds (unpaired standard errors),
and of one seed's two tests paired over the test images (paired_differences.json and
paired_evaluations.json, written by scripts/paired_differences.py and paired_evaluations.py)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from vgp_bench.analysis.paired import same_test_images
from vgp_bench.analysis.report.rows import Estimate, estimate
from vgp_bench.analysis.report.runs import RunRecord, tests_at_current_step
from vgp_bench.analysis.standard_error import mean_and_standard_error
from vgp_bench.studies import runs
from vgp_bench.studies.cells import difference_cell
from vgp_bench.studies.paired_differences import pair_runs

NO_PAIR = "— (no stored pair of per-example files)"  # not kept, other data or images, or
# not computed while both files were there


def seeds_estimate(study: str, name: str, seeds: Sequence[int], key: str) -> Estimate:
    """Mean ± standard error over seeds of a row's test `key`; one seed keeps its own."""
    tests = [runs.test_of(study, f"{name}_s{seed}") for seed in seeds]
    return estimate([test[key] for test in tests], [tests[0].get(f"{key}_stderr")])


def difference(
    a: str, b: str, seeds: Sequence[int], key: str, study: str
) -> tuple[float, float, list[float]]:
    """Mean of run prefix `a` minus mean of `b` (positive: b is better), the unpaired standard
    error sqrt(se_a^2 + se_b^2) of the two means, and the per-seed differences."""
    first, second = (seeds_estimate(study, name, seeds, key) for name in (a, b))
    a_values = [runs.test_of(study, f"{a}_s{s}")[key] for s in seeds]
    b_values = [runs.test_of(study, f"{b}_s{s}")[key] for s in seeds]
    per_seed = [x - y for x, y in zip(a_values, b_values, strict=True)]
    return first.mean - second.mean, math.hypot(first.stderr, second.stderr), per_seed


def seed_difference(
    a: str, b: str, seeds: Sequence[int], key: str, study: str
) -> tuple[float, float, list[float]]:
    """The mean of the per-seed differences a - b, its standard error over the seeds (their
    standard deviation / sqrt(seeds)), and the differences; one seed keeps the unpaired
    standard error of its two tests over the test images."""
    diff, se, per_seed = difference(a, b, seeds, key, study)
    if len(per_seed) < 2:
        return diff, se, per_seed
    mean, stderr = mean_and_standard_error(per_seed)
    return mean, stderr, per_seed


def beyond_three_se(diff: float, se: float) -> bool:
    """Whether a difference lies 3 standard errors or more from zero: the study's test for a
    difference that needs no more seeds."""
    return abs(diff) >= 3 * se


def seeds_for_three_se(diff: float, se: float, seeds: int) -> float:
    """The seeds a row would need for the difference to lie 3 standard errors from zero, at
    the measured difference and spread between seeds (the standard error falls as
    1/sqrt(seeds))."""
    return math.inf if diff == 0 else seeds * (3 * se / diff) ** 2


def paired_values(
    study: str, rows: tuple[str, str], seed: int, tests: tuple[dict, dict], key: str
) -> tuple[float, float] | None:
    """Row a minus row b (`rows`) of one seed between the evaluations `tests` and its standard
    error paired over the test images, from paired_differences.json (None: no pair)."""
    first, second = (f"{name}_s{seed}" for name in rows)
    return paired_run_values(study, (first, second), tests, key)


def paired_run_values(
    study: str, names: tuple[str, str], tests: tuple[dict, dict], key: str
) -> tuple[float, float] | None:
    """Run a minus run b (`names`, of any seeds) between the evaluations `tests` and its
    standard error paired over the test images, from paired_differences.json (None: no pair)."""
    files = [test.get("per_example_file") for test in tests]
    run_ids = [
        runs.load(study, run).get("run_id") if runs.has_run(study, run) else None for run in names
    ]
    for pair in runs.read_json(study, "paired_differences.json"):
        if key not in pair:
            continue
        stored, compared = pair.get("run_ids") or [None, None], list(pair_runs(pair))
        if compared == list(names) and pair["files"] == files:
            sign, theirs = 1.0, stored
        elif compared[::-1] == list(names) and pair["files"] == files[::-1]:
            sign, theirs = -1.0, stored[::-1]
        else:
            continue
        if any(None not in (a, b) and a != b for a, b in zip(theirs, run_ids, strict=True)):
            continue  # a pair of an earlier realization of these runs (the same file names)
        return sign * pair[key]["difference"], pair[key]["paired_se"]
    return None


def three_decimals(diff: float, se: float) -> str:
    """A paired difference's cell: its standard error to three decimals."""
    return difference_cell(diff, se, digits=3)


def paired_cell(
    study: str,
    rows: tuple[str, str],
    seed: int,
    tests: tuple[dict, dict],
    key: str,
    show: Callable[[float, float], str] = three_decimals,
) -> str:
    """One seed's difference of `rows` with its standard error paired over the test images (the
    evaluations `tests` the table's unpaired difference uses), written by `show`."""
    paired = paired_values(study, rows, seed, tests, key)
    return NO_PAIR if paired is None else show(*paired)


def seed_tests(study: str, a: str, b: str, seed: int) -> tuple[dict, dict]:
    """The test evaluations of rows a and b of one seed that their differences compare."""
    return runs.test_of(study, f"{a}_s{seed}"), runs.test_of(study, f"{b}_s{seed}")


def paired_cells(
    study: str, a: str, b: str, seeds: Sequence[int], **show: Callable[[float, float], str]
) -> str:
    """Each seed's IS difference a - b paired over the test images of its tests."""
    cells = (
        paired_cell(study, (a, b), seed, seed_tests(study, a, b, seed), "nll", **show)
        for seed in seeds
    )
    return "; ".join(f"seed {seed}: {cell}" for seed, cell in zip(seeds, cells, strict=True))


def any_pair(study: str, a: str, b: str, seeds: Sequence[int]) -> bool:
    """Whether any of the seeds has its IS difference a - b paired over the test images."""
    return any(
        paired_values(study, (a, b), seed, seed_tests(study, a, b, seed), "nll") is not None
        for seed in seeds
    )


def paired_se(study: str, run: str, own: dict[str, Any], other: dict[str, Any]) -> float | None:
    """The standard error of `other` - `own` paired over the test images, as
    paired_evaluations.json holds it from the two per-example files (None if not)."""
    files = (own.get("per_example_file"), other.get("per_example_file"))
    for pair in runs.read_json(study, "paired_evaluations.json"):
        if (pair["run"], pair["own_file"], pair["other_file"]) == (run, *files):
            return float(pair["paired_se"])
    return None


def test_pairs_of(
    first: dict[str, Any], second: dict[str, Any], same_draw: bool = True
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Two runs' tests at their current steps (any data) that read the same binary test
    images with the same S (with `same_draw=False`, the same grey images, binarized apart):
    the most precise first (most images, then most samples), and of two alike the one whose
    per-example files were both kept."""
    records = [RunRecord(first), RunRecord(second)]
    tests = [tests_at_current_step(record) for record in records]
    pairs = [
        (a, b)
        for a in tests[0]
        for b in tests[1]
        if same_test_images((records[0], a), (records[1], b), same_draw)
    ]
    pairs.sort(
        key=lambda pair: (
            pair[0].n_examples,
            pair[0].is_samples,
            bool(pair[0].per_example_file and pair[1].per_example_file),
        ),
        reverse=True,
    )
    return [(a.data, b.data) for a, b in pairs]
