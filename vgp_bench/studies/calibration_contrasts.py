"""What the calibration runs' other data and binarization change: a run's parameters tested on
its own data and on another file, and each other run against the protocol run on the same
test images, paired over them where both per-example files were kept."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgp_bench.analysis.paired import data_read
from vgp_bench.analysis.report.runs import RunRecord, chosen_evaluation, current_test_evaluations
from vgp_bench.studies import runs
from vgp_bench.studies.cells import (
    MISSING,
    data_format,
    difference_cell,
    draw_of,
    evaluation_cell,
    signed,
    table,
)
from vgp_bench.studies.differences import paired_cell, paired_se, test_pairs_of


@dataclass(frozen=True)
class Contrast:
    """A run set against the protocol run: the row's label, the run, what it measures."""

    label: str
    run: str
    measures: str


def other_data_tests(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """A run's test evaluations of another data file at its current step."""
    record = RunRecord(metrics)
    return [
        evaluation.data
        for evaluation in record.evaluations or []
        if evaluation.dataset is not None
        and not record.read_own_data(evaluation)
        and evaluation.run_steps == record.steps
        and (evaluation.split or "test") == "test"
    ]


def data_rows(study: str, run: str) -> list[list[object]]:
    """A run's rows of the data table: each test of other data beside its own data's."""
    metrics = runs.load(study, run)
    owns = [evaluation.data for evaluation in current_test_evaluations(RunRecord(metrics))]
    rows: list[list[object]] = []
    for other in other_data_tests(metrics):
        size = (other["n_examples"], other["is_samples"])
        alike = [e for e in owns if (e["n_examples"], e["is_samples"]) == size]
        if not alike:
            continue
        with_se = [(e, paired_se(study, run, e, other)) for e in alike]
        own, se = next(((e, v) for e, v in with_se if v is not None), (alike[0], None))
        rows.append(
            [
                f"`{run}`",
                metrics["epochs_completed"],
                own["n_examples"],
                own["is_samples"],
                data_format(metrics["dataset"]),
                evaluation_cell(own, "nll"),
                data_format(other["dataset"]),
                evaluation_cell(other, "nll"),
                signed(other["nll"] - own["nll"]),
                "— (per-example files not kept)" if se is None else f"{se:.3f}",
            ]
        )
    return rows


def data_table(study: str, names: Sequence[str]) -> str:
    """Each run evaluated on its own data and on another data file, the same parameters, test
    images and S: the difference, with its standard error paired over the test images where
    both per-example files were kept, from paired_evaluations.json (the evaluations share
    their seeds, so the pairing removes the images' own spread)."""
    header = [
        "run", "epoch", "test images", "S", "data it trained on", "-log p(x) there",
        "other data", "-log p(x) there", "other - own", "SE (paired)",
    ]  # fmt: skip
    rows = [row for run in names if runs.has_run(study, run) for row in data_rows(study, run)]
    if not rows:
        rows.append(["no run evaluated on other data yet", *[MISSING] * (len(header) - 1)])
    return table(header, rows)


def untested(study: str, names: Sequence[str]) -> list[str]:
    """The runs of `names` without a test of a finished (or interrupted) run."""
    return [
        name for name in names
        if chosen_evaluation(runs.load(study, name)) is None
        or runs.load(study, name).get("status") not in ("finished", "interrupted")
    ]  # fmt: skip


def why_not(study: str, contrast: Contrast, protocol: str) -> str | None:
    """Why a contrast has no difference yet (None when both runs are tested)."""
    names = (contrast.run, protocol)
    missing = [name for name in names if not runs.has_run(study, name)]
    if missing:
        return " and ".join(f"`{name}`" for name in missing) + " not run"
    waiting = untested(study, names)
    if waiting:
        return "waiting for the test of " + " and ".join(f"`{name}`" for name in waiting)
    return None


def contrast_row(study: str, contrast: Contrast, protocol: str, width: int) -> list[object]:
    """A contrast's row: the two tests of the same images and S and their difference."""
    metrics = (runs.load(study, contrast.run), runs.load(study, protocol))
    pairs = test_pairs_of(*metrics) or test_pairs_of(*metrics, same_draw=False)
    if not pairs:
        why = "not comparable: no tests of the same test images and S"
        return [contrast.label, *[MISSING] * (width - 3), why, contrast.measures]
    tests = pairs[0]
    read = [
        data_read(m.get("dataset"), t.get("dataset")) for m, t in zip(metrics, tests, strict=True)
    ]
    draws = [draw_of(data) for data in read]
    data = data_format(read[1])
    row, seed = runs.row_and_seed(contrast.run)
    rows_of = (row, runs.row_and_seed(protocol)[0])
    se = math.hypot(tests[0]["nll_stderr"], tests[1]["nll_stderr"])
    return [
        contrast.label,
        ", ".join(str(m["epochs_completed"]) for m in metrics),
        f"{data}, {draws[1]}" if draws[0] == draws[1] else f"{data}: {' / '.join(draws)}",
        tests[0]["n_examples"],
        tests[0]["is_samples"],
        evaluation_cell(tests[0], "nll"),
        evaluation_cell(tests[1], "nll"),
        difference_cell(tests[0]["nll"] - tests[1]["nll"], se),
        paired_cell(study, rows_of, seed, tests, "nll")
        if draws[0] == draws[1]
        else "— (other binary draws of the test images)",
        contrast.measures,
    ]


def differences_table(study: str, protocol: str, contrasts: Sequence[Contrast]) -> str:
    """Each contrast's run against the protocol run on the same test images and S (the other
    run's parameters tested on the protocol's data count): the difference of the estimates with
    their unpaired standard error, and paired over the images where the tests read the same
    binary draw and both per-example files were kept (paired_differences.json); where no two
    tests read the same draw, tests of the same grey images binarized apart (the
    fixed-binarization twin), unpaired only."""
    header = [
        "", "epochs", "test images (data, binary draw)", "images", "S", "-log p(x): the run",
        "the protocol", "difference (IS)", "IS, paired over the test images",
        "what it measures",
    ]  # fmt: skip
    rows = []
    for contrast in contrasts:
        why = why_not(study, contrast, protocol)
        if why is None:
            rows.append(contrast_row(study, contrast, protocol, len(header)))
        else:
            rows.append([contrast.label, *[MISSING] * (len(header) - 3), why, contrast.measures])
    return table(header, rows)
