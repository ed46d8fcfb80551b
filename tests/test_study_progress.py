"""scripts/study_progress.py: where each run of a study stands, from its metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import load_script


def write_metrics(folder: Path, bounds: list[float], **extra: object) -> None:
    folder.mkdir(parents=True)
    history = [{"epoch": e, "valid_bound": b} for e, b in enumerate(bounds, start=1)]
    record = {"status": "running", "epochs_completed": len(bounds), "history": history, **extra}
    (folder / "metrics.json").write_text(json.dumps(record))


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_status_table_says_how_far_each_run_is_from_its_stop(tmp_path: Path) -> None:
    """The best bound's gain over the last W epochs (the early-stopping criterion), the best
    epoch, the test once there is one; a run shorter than the window shows no gain."""
    module = load_script("study_progress")
    # the best bound -100 + e/10 rises 0.1 an epoch, then the last epoch falls back
    write_metrics(tmp_path / "a_s0", [-100 + e / 10 for e in range(1, 12)] + [-100.0])
    test = {"nll": 88.123, "bound_nll": 92.5, "is_samples": 5000, "n_examples": 10000}
    write_metrics(tmp_path / "b_s0", [-95.0, -94.0], status="finished", test=test)
    runs = module.load_runs(tmp_path)
    header, _, first, second = module.status_table(runs, window=5)
    assert "best gain, last 5 epochs" in header
    row = cells(first)
    assert row[0] == "a_s0" and row[5:8] == ["-100.00", "-98.90 (11)", "0.40"]
    row = cells(second)
    assert row[7] == "—" and row[-1] == "88.12 / 92.50 (S = 5000, 10000 images)"
    curve = module.curve_table(runs, [1, 12, 20])
    assert cells(curve[2]) == ["a_s0", "-99.90", "-100.00", "—"]
