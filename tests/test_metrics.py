"""metrics.json's typed records: old files read and written back unchanged, one writer each."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.helpers import REPO
from vgp_bench.run.folder.checkpoint import RunState
from vgp_bench.run.folder.metrics import (
    EpochRecord,
    Evaluation,
    NotAnObjectError,
    RunRecord,
    read_record,
    write_record,
)

COMMITTED_RUNS = sorted((REPO / "results").rglob("metrics.json"))

# a metrics.json of older code: no structure, train_objective, bound_gap; a key since retired
OLD = {
    "status": "finished",
    "model": "dlgm1",
    "inference": "vgp",
    "steps": 10,
    "retired_key": [1, 2],
    "dataset": {"name": "mnist", "split_sizes": {"test": 16}},
    "history": [{"epoch": 1, "step": 10, "valid_bound": -90.0, "z/warp_share": 0.5}, "junk"],
    "test": {"nll": 88.0, "bound_nll": 90.0, "step": 10, "subset": None},
}


@pytest.mark.parametrize("path", COMMITTED_RUNS, ids=lambda path: path.parent.name)
def test_committed_runs_read_and_write_back_byte_for_byte(path: Path, tmp_path: Path) -> None:
    record = read_record(path)
    assert record.to_json() == json.loads(path.read_text())
    assert record.model and record.status
    write_record(record, tmp_path / "metrics.json")
    assert json.loads((tmp_path / "metrics.json").read_text()) == json.loads(path.read_text())


def test_an_old_record_keeps_its_keys_and_nulls() -> None:
    data = copy.deepcopy(OLD)
    record = RunRecord(data)
    assert record.structure is None and not record.has("structure")
    assert record.test is not None and record.test.has("subset") and record.test.subset is None
    assert not record.test.has("bound_gap") and record.test.bound_gap is None
    assert [entry.diagnostics for entry in record.history or []] == [{"z/warp_share": 0.5}]
    record.status = "running"
    assert data["status"] == "running" and data["retired_key"] == [1, 2]  # a view, not a copy
    assert record.to_json() is data


def test_a_later_evaluation_is_appended_and_never_replaces_the_test() -> None:
    record = RunRecord(copy.deepcopy(OLD))
    later = Evaluation(nll=87.0, is_samples=5000, checkpoint="best.pt")
    record.add_evaluation(later)
    assert record.test is not None and record.test.nll == 88.0
    assert [evaluation.nll for evaluation in record.evaluations or []] == [87.0]
    fresh = RunRecord()
    fresh.add_evaluation(later)
    assert fresh.test is not None and fresh.test.data is later.data


def test_progress_comes_from_the_loop_state() -> None:
    state = RunState(step=7, epoch=1, wall_time_s=1.23456, nonfinite_total=2)
    state.history.append(EpochRecord(epoch=1, step=7, train_bound=-3.0).to_json())
    record = RunRecord()
    record.record_progress(state, "running", None, world_size=1)
    assert record.to_json() == {
        "status": "running",
        "error": None,
        "epochs_completed": 1,
        "steps": 7,
        "wall_time_s": 1.235,
        "history": [{"epoch": 1, "step": 7, "train_bound": -3.0}],
        "eval_at_epochs": {},
        "nonfinite_skipped": 2,
        "world_size": 1,
    }


def test_unknown_keys_and_non_objects_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no key 'nlll'"):
        Evaluation(nlll=1.0)
    (tmp_path / "metrics.json").write_text("[1, 2]")
    with pytest.raises(NotAnObjectError):
        read_record(tmp_path / "metrics.json")


def test_the_printed_summary_names_the_split_evaluated() -> None:
    from vgp_bench.run.loop.evaluate import format_summary

    summary = {
        "nll": 89.03,
        "nll_stderr": 1.03,
        "bound_nll": 94.04,
        "bound_nll_stderr": 1.09,
        "is_samples": 5000,
        "n_examples": 400,
    }
    valid = Evaluation({**summary, "split": "valid"})
    assert format_summary(valid).splitlines()[1].split()[0] == "valid"
    assert format_summary(Evaluation(summary)).splitlines()[1].split()[0] == "test"  # older
    assert format_summary(Evaluation(summary), "final").splitlines()[1].split()[0] == "final"
