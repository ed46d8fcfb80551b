"""The top-level README's paper rows: each row of the paper against what measures it here, and
whether that is a reproduction (within 0.5 nats under the row's own protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.study_folders import run_with_test, write_run
from vgp_bench.studies import paper_rows
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.paper_rows import Measure, PaperRow


def cells_of(text: str, label: str) -> list[list[str]]:
    """The table lines of a row (its first line and the measures under it)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {label} |"))
    found = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("|  |"):
            break
        found.append(line)
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in found]


def test_each_paper_row_says_reproduced_another_protocol_under_way_or_not_run(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    for seed, nll in ((0, 86.4), (1, 86.6)):
        run_with_test(tmp_path / "own" / "runs" / f"vae_s{seed}", nll, 1.0)
    run_with_test(tmp_path / "own" / "runs" / "far_s0", 88.0, 1.0)
    run_with_test(tmp_path / "other" / "runs" / "vae_s0", 86.7, 1.0)
    write_run(tmp_path / "own" / "runs" / "vgp_s0", "running", [], 10, None)
    rows = [
        PaperRow(
            "VAE",
            86.76,
            [Measure("own", "vae", "theirs", own=True), Measure("other", "vae", "ours")],
        ),
        PaperRow("far", 86.76, [Measure("own", "far", "theirs", own=True)]),
        PaperRow("VGP", 84.79, [Measure("own", "vgp", "theirs"), Measure("own", "none", "x")]),
        PaperRow("IWAE", 82.90, []),
    ]
    monkeypatch.setattr(paper_rows, "PAPER_ROWS", rows)
    text = paper_rows.paper_rows_table()
    (vae, other) = cells_of(text, "VAE")
    assert vae[:3] == ["VAE", "86.76", "86.50 ± 0.10"]
    assert "theirs; 1 epochs, 2 seeds; S = 5000 on 10,000 test images" in vae[3]
    assert vae[5] == "**reproduced** (-0.26, within 0.5 nats)"
    assert other[5] == "another protocol (-0.06 nats)"  # near, yet not its own protocol
    assert cells_of(text, "far")[0][5] == "not reproduced (+1.24 nats)"
    under_way, never = cells_of(text, "VGP")
    assert under_way[2] == "—" and under_way[5] == "under way"
    assert never[5] == "not run yet"
    assert cells_of(text, "IWAE")[0][5] == "not run"


@pytest.mark.parametrize("row", paper_rows.PAPER_ROWS, ids=lambda row: row.label[:20])
def test_the_committed_measures_name_studies_that_exist(row: PaperRow) -> None:
    for measure in row.measures:
        study = study_runs.RESULTS / measure.study
        assert study.is_dir() or measure.study == "calibrated", measure
