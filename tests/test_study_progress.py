"""vgp_bench/studies/progress.py (scripts/study_progress.py): where each run of a study
stands, from its metrics.json."""

from __future__ import annotations

import json
from pathlib import Path

from vgp_bench.studies import progress as module


def write_metrics(folder: Path, bounds: list[float], **extra: object) -> None:
    folder.mkdir(parents=True)
    history = [{"epoch": e, "valid_bound": b} for e, b in enumerate(bounds, start=1)]
    record = {"status": "running", "epochs_completed": len(bounds), "history": history, **extra}
    (folder / "metrics.json").write_text(json.dumps(record))


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_status_table_says_how_far_each_run_is_from_its_stop(tmp_path: Path) -> None:
    """With the study's early stopping, each run's epochs without a gain, replayed by the
    trainer's own rule; the best epoch; the test once there is one."""
    # gains of 1, then 0.4 and 0.4 (below min_delta 0.5 each, 0.8 together), then 0.2: the
    # counter restarts when the bound beats the last gain's by more than 0.5
    write_metrics(tmp_path / "a_s0", [-100.0, -99.0, -98.6, -98.2, -98.0, -99.0])
    test = {"nll": 88.123, "bound_nll": 92.5, "is_samples": 5000, "n_examples": 10000}
    write_metrics(tmp_path / "b_s0", [-95.0, -94.0], status="finished", test=test)
    runs = module.load_runs(tmp_path)
    header, _, first, second = module.status_table(runs, (50, 0.5)).splitlines()
    assert "epochs without a gain of 0.5 (of 50)" in header
    row = cells(first)
    assert row[0] == "a_s0" and row[5:8] == ["-99.00", "-98.00 (5)", "2"]
    assert cells(second)[7] == "0" and cells(second)[-1] == "88.12 / 92.50 (S = 5000, 10000 images)"
    assert len(cells(module.status_table(runs).splitlines()[2])) == len(cells(header)) - 1
    curve = module.curve_table(runs, [1, 6, 20]).splitlines()
    assert cells(curve[2]) == ["a_s0", "-100.00", "-99.00", "—"]


def test_the_counter_is_the_trainers_own(tmp_path: Path) -> None:
    """Replayed on a noisy curve, the counter equals the trainer's EarlyStopping state."""
    from vgp_bench.run.folder.checkpoint import RunState
    from vgp_bench.run.loop.early_stopping import EarlyStopping

    bounds = [-100 + 3 * (1 - 0.9**e) + 0.3 * ((e * 7919) % 11 - 5) / 5 for e in range(80)]
    history = [{"epoch": e + 1, "valid_bound": b} for e, b in enumerate(bounds)]
    rule, state = EarlyStopping(patience=None, min_delta=0.5), RunState()
    for epoch, bound in enumerate(bounds, start=1):
        rule.observe(state, bound)
        assert module.epochs_without_gain(history[:epoch], 0.5) == state.epochs_without_gain
    assert state.epochs_without_gain > 10  # the curve flattened: a long run without a gain


def test_a_run_lost_with_its_checkout_says_so(tmp_path: Path) -> None:
    """A snapshot kept under a `_lost` name is shown as lost, not as the running run it was."""
    write_metrics(tmp_path / "run_lost1_s0", [-100.0, -99.0])
    write_metrics(tmp_path / "run_s0", [-100.0])
    rows = module.status_table(module.load_runs(tmp_path)).splitlines()[2:]
    assert [cells(row)[:3] for row in rows] == [
        ["run_lost1_s0", "lost (snapshot)", "2"],
        ["run_s0", "running", "1"],
    ]
