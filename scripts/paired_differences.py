"""Differences between the runs of a study, paired over the test images.

For each seed, each two runs `<row>_s<seed>` of STUDY_DIR whose tests (the evaluation the
report uses: vgp-report's most precise current test evaluation) kept their per-example files
(`eval.save_per_example=true`), read the same data and tested the same images with the same
S: the difference first - second of -log p(x) and of -bound, and its standard error over the
images' differences, go to OUT (JSON), which the results READMEs read; the per-example files
themselves stay in the run folders. Seeds differ in more than the test images, so a paired
standard error says how precisely one seed's difference is measured, not how much it would
change with another seed.

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

from vgp_bench.analysis.paired import PER_EXAMPLE_KEYS, paired_difference, per_example_values
from vgp_bench.analysis.report.runs import chosen_evaluation
from vgp_bench.data_identity import data_changes
from vgp_bench.run.metrics import Evaluation, RunRecord, read_record

RUN_NAME = re.compile(r"(?P<row>.+)_s(?P<seed>\d+)")


TestedRun = tuple[Path, RunRecord, Evaluation]


def tested_runs(study_dir: Path) -> dict[tuple[str, int], TestedRun]:
    """`(row, seed) -> (folder, record, test)` of each run folder with a test evaluation."""
    runs = {}
    for folder in sorted(study_dir.iterdir()):
        match = RUN_NAME.fullmatch(folder.name)
        if match is None or not (folder / "metrics.json").is_file():
            continue
        record = read_record(folder / "metrics.json")
        test = chosen_evaluation(record.to_json())
        if test is not None:
            runs[(match["row"], int(match["seed"]))] = (folder, record, Evaluation(test))
    return runs


def read_data(record: RunRecord, test: Evaluation) -> dict[str, Any]:
    """The identity of the data a test read: its own record's, else the run's."""
    if test.dataset is not None:
        return dict(test.dataset)
    return record.dataset.to_json() if record.dataset is not None else {}


def same_test(first: TestedRun, second: TestedRun) -> bool:
    """Whether two runs' tests read the same data, images and S."""
    (_, first_record, a), (_, second_record, b) = first, second
    data_a, data_b = read_data(first_record, a), read_data(second_record, b)
    return (
        (a.n_examples, a.is_samples, a.subset) == (b.n_examples, b.is_samples, b.subset)
        and not data_changes(data_a, data_b)
        and not data_changes(data_b, data_a)
    )


def study_pairs(study_dir: Path) -> list[dict[str, Any]]:
    """Every paired difference of the study: two rows, one seed, both tests' files kept."""
    runs = tested_runs(study_dir)
    pairs = []
    for (first_key, first), (second_key, second) in itertools.combinations(
        sorted(runs.items(), key=lambda item: item[0]), 2
    ):
        if first_key[1] != second_key[1] or not same_test(first, second):
            continue
        (first_dir, _, first_test), (second_dir, _, second_test) = first, second
        pair: dict[str, Any] = {
            "first": first_key[0],
            "second": second_key[0],
            "seed": first_key[1],
            "n_examples": first_test.n_examples,
            "is_samples": first_test.is_samples,
        }
        for key in PER_EXAMPLE_KEYS:
            values = (
                per_example_values(first_dir, first_test, key),
                per_example_values(second_dir, second_test, key),
            )
            if values[0] is None or values[1] is None:
                break
            difference, paired_se = paired_difference(*values)
            pair[key] = {"difference": difference, "paired_se": paired_se}
        else:
            pairs.append(pair)
    return pairs


def main(argv: list[str] | None = None) -> int:
    study_dir, out = (Path(arg) for arg in (argv or sys.argv[1:]))
    pairs = study_pairs(study_dir)
    out.write_text(json.dumps(pairs, indent=1) + "\n")
    print(f"{out}: {len(pairs)} paired difference(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
