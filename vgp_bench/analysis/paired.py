"""Differences paired over test images, from the per-example files evaluations keep.

Two evaluations of the same test images (the same binary draw, the same S) share the images'
difficulty, so the standard error of their difference over the images' differences is far
smaller than the two standard errors combined. Torch-free: the results scripts read it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py

from vgp_bench.analysis.standard_error import mean_and_standard_error
from vgp_bench.data_identity import DATA_IDENTITY_KEYS, data_changes
from vgp_bench.run.folder.metrics import Evaluation, RunRecord, read_record

# the per-example file's datasets, as -log p(x) and -bound
PER_EXAMPLE_KEYS = {"nll": "log_likelihood", "bound_nll": "bound"}
# how far the file's mean may be from the evaluation's record (relative; float32 sums)
MEAN_TOLERANCE = 1e-5
# the settings that choose a test's binary draw from a data file's grey levels (dynamic
# binarization draws the test images once with the seed; fixed reads the file's own draw)
TEST_DRAW_KEYS = ("binarization", "eval_binarization_seed")


def data_read(run_dataset: Mapping[str, Any] | None, test_dataset: Any) -> dict[str, Any]:
    """What a test read: the run's data (`dataset` of its record), or where the test records
    the file it read (vgp-eval's `dataset`: the identity keys alone) that file's identity with
    the run's settings, which chose the draw from it (no identity key of the run's file
    kept: a key the test's record leaves out is one that file does not state)."""
    data = dict(run_dataset or {})
    if test_dataset is None:
        return data
    settings = {key: value for key, value in data.items() if key not in DATA_IDENTITY_KEYS}
    return {**settings, **dict(test_dataset)}


def dataset_of(record: RunRecord) -> dict[str, Any] | None:
    """A run record's `dataset` (what it trained on), None where it does not say."""
    return record.dataset.to_json() if record.dataset is not None else None


def same_test_images(
    first: tuple[RunRecord, Evaluation],
    second: tuple[RunRecord, Evaluation],
    same_draw: bool = True,
) -> bool:
    """Whether two tests read the same binary test images with the same S: the same data
    file contents, the same draw of binary images from it (where both records say which;
    not asked with `same_draw=False`: the same grey images) and the same number of images (a
    test of N images reads the split's first N)."""
    (first_record, a), (second_record, b) = first, second
    data_a = data_read(dataset_of(first_record), a.dataset)
    data_b = data_read(dataset_of(second_record), b.dataset)
    draws_differ = same_draw and any(
        data_a.get(key) != data_b.get(key)
        for key in TEST_DRAW_KEYS
        if key in data_a and key in data_b
    )
    return (
        (a.n_examples, a.is_samples) == (b.n_examples, b.is_samples)
        and not draws_differ
        and not data_changes(data_a, data_b)
        and not data_changes(data_b, data_a)
    )


def per_example_values(
    folder: Path, evaluation: Evaluation, key: str = "nll"
) -> list[float] | None:
    """An evaluation's per-example `key` (nll or bound_nll) from its file in the run folder,
    when the file is there and holds what the evaluation measured: its S, its number of images
    and, averaged, its `key` (a later evaluation may have replaced the file). None otherwise,
    and where a value is not finite (a diverged run) or there are fewer than two."""
    name = evaluation.per_example_file
    path = folder / str(name)
    if not name or not path.is_file():
        return None
    with h5py.File(path, "r") as handle:
        values = [-float(value) for value in handle[PER_EXAMPLE_KEYS[key]][()]]
        samples = handle.attrs.get("is_samples")
    recorded = evaluation.data.get(key)
    if (
        samples is None
        or int(samples) != evaluation.is_samples
        or len(values) != evaluation.n_examples
        or len(values) < 2
        or not all(math.isfinite(value) for value in values)
        or not isinstance(recorded, int | float)
        or abs(statistics.fmean(values) - recorded) > MEAN_TOLERANCE * max(1.0, abs(recorded))
    ):
        return None
    return values


def paired_difference(first: Sequence[float], second: Sequence[float]) -> tuple[float, float]:
    """Mean of `first - second` over the images and its standard error over their differences."""
    differences = [a - b for a, b in zip(first, second, strict=True)]
    if len(differences) < 2:
        raise ValueError("paired_difference: needs two images or more")
    return mean_and_standard_error(differences)


def current_files(record: RunRecord) -> set[str]:
    """The per-example files that the run's evaluations of its current step name (its
    end-of-training test, and vgp-eval's while the run has not trained past them)."""
    evaluations = [record.test] + [
        evaluation
        for evaluation in record.evaluations or []
        if (evaluation.run_steps if evaluation.has("run_steps") else record.steps) == record.steps
    ]
    return {str(e.per_example_file) for e in evaluations if e is not None and e.per_example_file}


def stored_pair_stands(sources: Sequence[tuple[Path, str, str | None]]) -> bool:
    """Whether a paired difference measured earlier from per-example files, each `(run folder,
    file name, the run's run_id then)`, stands as it was stored because it cannot be measured
    again now: every run folder either has no record (a renewed checkout took it) or the same
    run's record (its run_id, where the pair stored one) whose current evaluations still name
    the file, and at least one of the files is gone. A run trained on since names other files,
    and another realization of it (a run started anew) is another run: either drops the pair."""
    missing = False
    for folder, name, run_id in sources:
        path = folder / "metrics.json"
        if not path.is_file():
            missing = True
            continue
        record = read_record(path)
        if (run_id is not None and record.run_id != run_id) or name not in current_files(record):
            return False
        missing = missing or not (folder / name).is_file()
    return missing


def record_run_id(folder: Path) -> str | None:
    """The run_id of the record in a run folder (None without one)."""
    path = folder / "metrics.json"
    return read_record(path).run_id if path.is_file() else None
