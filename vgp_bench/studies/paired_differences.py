"""Differences between the runs of a study, paired over the test images.

For each seed, each two runs `<row>_s<seed>` of STUDY_DIR, and each two of their test
evaluations at their current steps (the end-of-training test and vgp-eval's, while the run has
not trained past them; of its own data or of another data file) that read the same binary test
images (the same data file contents and draw) with the same S, both with their per-example
files kept (`eval.save_per_example=true`): the difference first - second of -log p(x) and of
-bound, and its standard error over the images' differences, go to OUT (JSON), which the
results READMEs read; the per-example files themselves stay in the run folders (data files are
never committed). A pair OUT already holds that cannot be measured again, because one of its
per-example files is gone while both runs' records still name them as their current tests, is
kept as it is. Seeds differ in more than the test images, so a paired standard error says how
precisely one seed's difference is measured, not how much it would change with another seed.
With `--across-seeds` two rows' runs of different seeds are paired too (a study whose rows have
one seed each, not the same one): such a pair names the second run's seed (`second_seed`).

    .venv/bin/python scripts/paired_differences.py outputs/studies/convergence \
        results/convergence/paired_differences.json
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

from vgp_bench.analysis.paired import (
    PER_EXAMPLE_KEYS,
    paired_difference,
    per_example_values,
    record_run_id,
    same_test_images,
    stored_pair_stands,
)
from vgp_bench.analysis.report.runs import (
    RunRecord,
    is_lost_snapshot,
    read_record,
    tests_at_current_step,
)

RUN_NAME = re.compile(r"(?P<row>.+)_s(?P<seed>\d+)")


def current_tests(study_dir: Path) -> dict[tuple[str, int], tuple[Path, RunRecord]]:
    """`(row, seed) -> (folder, record)` of each run folder with a test at its current step."""
    runs: dict[tuple[str, int], tuple[Path, RunRecord]] = {}
    for folder in sorted(study_dir.iterdir()) if study_dir.is_dir() else []:
        match = RUN_NAME.fullmatch(folder.name)
        if (
            match is None
            or is_lost_snapshot(folder.name)
            or not (folder / "metrics.json").is_file()
        ):
            continue
        record = read_record(folder / "metrics.json")
        if tests_at_current_step(record):
            runs[(match["row"], int(match["seed"]))] = (folder, record)
    return runs


def test_pairs(first: tuple[Path, RunRecord], second: tuple[Path, RunRecord]) -> list[dict]:
    """The paired differences of two runs' tests at their current steps that read the same
    binary test images (data file contents and draw) with the same S, whose per-example files
    were both kept."""
    (first_dir, first_record), (second_dir, second_record) = first, second
    pairs = []
    for a in tests_at_current_step(first_record):
        for b in tests_at_current_step(second_record):
            if not same_test_images((first_record, a), (second_record, b)):
                continue
            pair: dict[str, Any] = {
                "n_examples": a.n_examples,
                "is_samples": a.is_samples,
                "files": [a.per_example_file, b.per_example_file],
                "run_ids": [first_record.run_id, second_record.run_id],
            }
            for key in PER_EXAMPLE_KEYS:
                values = (
                    per_example_values(first_dir, a, key),
                    per_example_values(second_dir, b, key),
                )
                if values[0] is None or values[1] is None:
                    break
                difference, paired_se = paired_difference(*values)
                pair[key] = {"difference": difference, "paired_se": paired_se}
            else:
                pairs.append(pair)
    return pairs


def study_pairs(study_dir: Path, across_seeds: bool = False) -> list[dict[str, Any]]:
    """Every paired difference of the study: two rows, one seed (any two seeds with
    `across_seeds`), tests of the same binary test images and S with both per-example files
    kept."""
    runs = current_tests(study_dir)
    pairs = []
    for (first_key, first), (second_key, second) in itertools.combinations(
        sorted(runs.items(), key=lambda item: item[0]), 2
    ):
        if first_key[0] == second_key[0] or (first_key[1] != second_key[1] and not across_seeds):
            continue
        seeds: dict[str, int] = {"seed": first_key[1]}
        if second_key[1] != first_key[1]:
            seeds["second_seed"] = second_key[1]
        for pair in test_pairs(first, second):
            pairs.append({"first": first_key[0], "second": second_key[0], **seeds, **pair})
    return pairs


def pair_runs(pair: dict[str, Any]) -> tuple[str, str]:
    """The run names a stored pair compares, first and second."""
    second_seed = pair.get("second_seed", pair["seed"])
    return f"{pair['first']}_s{pair['seed']}", f"{pair['second']}_s{second_seed}"


def kept_pairs(out: Path, study_dir: Path) -> list[dict[str, Any]]:
    """The pairs `out` already holds that cannot be measured again because a per-example file
    of theirs is gone (with a renewed checkout, or never copied to a results folder) while the
    tests they came from are still the same runs' current ones: kept as they were measured,
    with the runs' run_ids (taken from their records where a pair stored before had none)."""
    kept = []
    for pair in json.loads(out.read_text()) if out.is_file() else []:
        folders = [study_dir / run for run in pair_runs(pair)]
        known = pair.get("run_ids") or [None, None]
        if stored_pair_stands(list(zip(folders, pair["files"], known, strict=True))):
            kept.append(
                {**pair, "run_ids": pair.get("run_ids") or list(map(record_run_id, folders))}
            )
    return kept


def main(argv: list[str] | None = None) -> int:
    """Write OUT from the runs of STUDY_DIR (`STUDY_DIR OUT.json [--across-seeds]`)."""
    args = sys.argv[1:] if argv is None else argv
    across_seeds = "--across-seeds" in args
    args = [arg for arg in args if arg != "--across-seeds"]
    if len(args) != 2:
        print("usage: paired_differences.py STUDY_DIR OUT.json [--across-seeds]", file=sys.stderr)
        return 2
    study_dir, out = (Path(arg) for arg in args)
    pairs = sorted(
        study_pairs(study_dir, across_seeds) + kept_pairs(out, study_dir),
        key=lambda pair: (pair["first"], pair["seed"], pair["second"], pair.get("second_seed", -1)),
    )
    out.write_text(json.dumps(pairs, indent=1) + "\n")
    print(f"{out}: {len(pairs)} paired difference(s)")
    return 0
