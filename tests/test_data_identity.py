"""The data's identity: what a resume compares, and which evaluations are a run's own."""

from __future__ import annotations

import json

from vgp_bench.data_identity import data_changes, data_identity, describe_changes
from vgp_bench.run.folder.metrics import Evaluation, RunRecord

SKETCH_INFO = {
    "name": "sketch",
    "path": "/data/sketch.h5",
    "preprocessing": {"format_version": 1, "resolution": 56, "sizes": (1111, 1111), "seed": 0},
}
MNIST_INFO = {"name": "mnist", "format_version": 2, "content_sha256": "ab" * 32, "sha256": "cd"}


def test_the_recorded_identity_matches_the_loaded_one_after_a_json_round_trip() -> None:
    """metrics.json turns tuples into lists: the same data is still the same data; a moved
    file (its path) is not other data; an identity key the record does not state (None, or
    absent: older code) is not compared."""
    for info in (SKETCH_INFO, MNIST_INFO):
        recorded = json.loads(json.dumps(info))
        assert data_changes(recorded, info) == {}
        assert data_changes({**recorded, "path": "/elsewhere/file.h5"}, info) == {}
    older = {key: value for key, value in MNIST_INFO.items() if key != "content_sha256"}
    assert data_changes(older, {**MNIST_INFO, "content_sha256": "ef" * 32}) == {}
    assert data_changes({**older, "content_sha256": None}, MNIST_INFO) == {}
    assert "path" not in data_identity(SKETCH_INFO) and "name" not in data_identity(MNIST_INFO)


def test_other_data_is_named_key_by_key() -> None:
    rebuilt = {**SKETCH_INFO, "preprocessing": {**SKETCH_INFO["preprocessing"], "seed": 1}}
    changes = data_changes(json.loads(json.dumps(SKETCH_INFO)), rebuilt)
    assert list(changes) == ["preprocessing"]
    assert describe_changes(changes) == "preprocessing.seed '0' -> '1'"
    old_format = {**MNIST_INFO, "format_version": 1, "content_sha256": "12" * 32}
    text = describe_changes(data_changes(old_format, MNIST_INFO))
    assert text == (
        "content_sha256 '121212121212...' -> 'abababababab...', format_version '1' -> '2'"
    )


def test_an_evaluation_of_other_data_never_becomes_the_runs_test() -> None:
    """vgp-eval fills a run's missing `test` with its result only when it read the run's own
    data; an evaluation that does not say which data it read (older code) did."""
    record = RunRecord({"dataset": {**MNIST_INFO, "format_version": 1}})
    other = Evaluation({"nll": 86.9, "dataset": data_identity(MNIST_INFO)})
    record.add_evaluation(other)
    assert record.test is None and not record.read_own_data(other)
    own = Evaluation({"nll": 87.8})
    record.add_evaluation(own)
    assert record.test is not None and record.test.nll == 87.8
    assert [evaluation.nll for evaluation in record.evaluations] == [86.9, 87.8]
