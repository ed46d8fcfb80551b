"""Paired differences between a run's test evaluations on its own data and on other data.

For each run folder under STUDY_DIR, each evaluation of other data (vgp-eval's `dataset`) is
paired with an evaluation on the run's own data of the same images and S, both with their per-
example files kept (`eval.save_per_example=true`); the difference of -log p(x) and its standard
error over the images' differences go to OUT (JSON), which the results READMEs read. The per-
example files stay in the run folders (data files are never committed). A pair OUT already
holds that cannot be measured again, because one of its per-example files is gone while the
run's record still names both as current evaluations, is kept as it is.

    .venv/bin/python scripts/paired_evaluations.py outputs/studies/calibration \
        results/calibration/paired_evaluations.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vgp_bench.analysis.paired import (
    paired_difference,
    per_example_values,
    record_run_id,
    stored_pair_stands,
)
from vgp_bench.analysis.report.runs import RunRecord, is_lost_snapshot, read_record


def run_pairs(folder: Path) -> list[dict[str, Any]]:
    """The paired differences of one run folder's evaluations (other data minus own data)."""
    record: RunRecord = read_record(folder / "metrics.json")
    evaluations = [e for e in record.evaluations or [] if e.run_steps == record.steps]
    kept = {id(e): per_example_values(folder, e) for e in evaluations}
    pairs = []
    for other in evaluations:
        if record.read_own_data(other) or kept[id(other)] is None:
            continue
        size = (other.n_examples, other.is_samples)
        owns = [
            e
            for e in evaluations
            if record.read_own_data(e)
            and kept[id(e)] is not None
            and (e.n_examples, e.is_samples) == size
        ]
        if not owns:
            continue
        own = owns[0]
        difference, paired_se = paired_difference(kept[id(other)], kept[id(own)])
        pairs.append(
            {
                "run": folder.name,
                "own_file": own.per_example_file,
                "other_file": other.per_example_file,
                "run_id": record.run_id,
                "n_examples": own.n_examples,
                "difference": difference,
                "paired_se": paired_se,
            }
        )
    return pairs


def kept_pairs(out: Path, study_dir: Path) -> list[dict[str, Any]]:
    """The pairs `out` already holds that cannot be measured again because a per-example file
    of theirs is gone (with a renewed checkout, or never copied to a results folder) while the
    evaluations they came from are still the same run's current ones: kept as they were
    measured, with the run's run_id (taken from its record where a pair stored before had
    none)."""
    kept = []
    for pair in json.loads(out.read_text()) if out.is_file() else []:
        folder = study_dir / pair["run"]
        files = (pair["own_file"], pair["other_file"])
        if stored_pair_stands([(folder, name, pair.get("run_id")) for name in files]):
            kept.append({**pair, "run_id": pair.get("run_id") or record_run_id(folder)})
    return kept


def main(argv: list[str] | None = None) -> int:
    """Write OUT from the runs of STUDY_DIR (`STUDY_DIR OUT.json`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: paired_evaluations.py STUDY_DIR OUT.json", file=sys.stderr)
        return 2
    study_dir, out = (Path(arg) for arg in args)
    folders = sorted(study_dir.iterdir()) if study_dir.is_dir() else []
    pairs = [
        pair
        for folder in folders
        if (folder / "metrics.json").is_file() and not is_lost_snapshot(folder.name)
        for pair in run_pairs(folder)
    ]
    pairs = sorted(pairs + kept_pairs(out, study_dir), key=lambda pair: pair["run"])
    out.write_text(json.dumps(pairs, indent=1) + "\n")
    print(f"{out}: {len(pairs)} paired difference(s)")
    return 0
