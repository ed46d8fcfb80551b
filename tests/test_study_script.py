"""scripts/study_vgp_vs_vae.sh: its stages' bookkeeping, on run folders made up for the test."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.helpers import REPO, TINY, compose_config
from tests.test_report import evaluated, write_run
from vgp_bench.run.commands.train import train

SCRIPT = REPO / "scripts" / "study_vgp_vs_vae.sh"


def run_stage(
    stage: str, study: Path, results: Path, runs: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "STUDY_DIR": str(study),
        "RESULTS_DIR": str(results),
        "FIXED_RESULTS_DIR": str(results / "fixed_decoder"),
    }
    if runs is not None:
        env["RUNS"] = runs
    return subprocess.run(
        ["bash", str(SCRIPT), stage], env=env, capture_output=True, text=True, timeout=120
    )


def test_report_keeps_metrics_and_configs_of_the_study_runs_only(
    tmp_path: Path,
) -> None:
    study, results = tmp_path / "study", tmp_path / "results"
    for seed, name in enumerate(["dlgm1_vae_s0", "pilot_tied_global", "fam_vae", "fixed_vae"]):
        folder = write_run(
            study / name, model="dlgm1", inference="vae", seed=seed, test=evaluated(93.0, 98.0)
        )
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "best.pt").write_bytes(b"never copied")
        (folder / "train.log").write_text("never copied")
    per_example = "test_per_example_k5000_data-ab53c616.h5"  # a data file: never copied
    (study / "dlgm1_vae_s0" / per_example).write_bytes(b"never copied")
    done = run_stage("report", study, results)
    assert done.returncode == 0, done.stderr
    kept = sorted(path.name for path in (results / "runs").iterdir())
    assert kept == ["dlgm1_vae_s0", "pilot_tied_global"]  # fam_*, fixed_*: their own stages
    for name in kept:
        assert sorted(p.name for p in (results / "runs" / name).iterdir()) == [
            "config.yaml",
            "metrics.json",
        ]
    assert "DLGM 1hl + VAE" in (results / "table.md").read_text()
    assert (results / "table.csv").read_text().startswith("table,")


def test_an_unknown_stage_prints_the_usage(tmp_path: Path) -> None:
    done = run_stage("nonsense", tmp_path / "study", tmp_path / "results")
    assert done.returncode == 2
    assert "usage:" in done.stderr and "fixed|local" in done.stderr


def test_statistics_measures_the_finished_runs_only(tmp_path: Path) -> None:
    study, results = tmp_path / "study", tmp_path / "results"
    train(compose_config([*TINY, "eval.at_end=false"]), study / "dlgm1_vae_s0")
    # a run cut off mid-training: its best.pt exists, but it is not measured
    unfinished = write_run(
        study / "dlgm1_vae_s1", model="dlgm1", inference="vae", seed=1, status="running"
    )
    (unfinished / "checkpoints").mkdir()
    (unfinished / "checkpoints" / "best.pt").write_bytes(b"mid-training")
    done = run_stage("statistics", study, results)
    assert done.returncode == 0, done.stderr
    record = json.loads((results / "posterior_statistics.json").read_text())
    assert [run["run"] for run in record["runs"]] == ["dlgm1_vae_s0"]
    assert record["split"] == "valid"
    assert "| dlgm1_vae_s0 |" in (results / "posterior_statistics.md").read_text()
    # the fixed stage has no finished run here: said, and nothing written for it
    assert "fixed_decoder: no finished run to measure" in done.stderr
    assert not (results / "fixed_decoder").exists()
    # once it has one, its runs are measured into its own results
    train(compose_config([*TINY, "eval.at_end=false"]), study / "fixed_vae")
    done = run_stage("statistics", study, results)
    assert done.returncode == 0, done.stderr
    fixed = json.loads((results / "fixed_decoder" / "posterior_statistics.json").read_text())
    assert [run["run"] for run in fixed["runs"]] == ["fixed_vae"]
    # RUNS naming fixed runs only: those are measured, the study's file is left as it was
    study_file = (results / "posterior_statistics.json").read_text()
    done = run_stage("statistics", study, results, runs="fixed_vae")
    assert done.returncode == 0, done.stderr
    assert (results / "posterior_statistics.json").read_text() == study_file
    # RUNS naming one study run: merged into the study's file, the other runs kept
    train(compose_config([*TINY, "eval.at_end=false", "seed=2"]), study / "dlgm1_vae_s2")
    done = run_stage("statistics", study, results, runs="dlgm1_vae_s2")
    assert done.returncode == 0, done.stderr
    record = json.loads((results / "posterior_statistics.json").read_text())
    assert [run["run"] for run in record["runs"]] == ["dlgm1_vae_s0", "dlgm1_vae_s2"]
    assert "| dlgm1_vae_s0 |" in (results / "posterior_statistics.md").read_text()
    # a run that cannot be measured stops the stage and leaves both files as they were
    table = (results / "posterior_statistics.md").read_text()
    (study / "dlgm1_vae_s2" / "checkpoints" / "best.pt").write_bytes(b"torn")
    done = run_stage("statistics", study, results)
    assert done.returncode == 2 and "unreadable" in done.stderr
    assert json.loads((results / "posterior_statistics.json").read_text()) == record
    assert (results / "posterior_statistics.md").read_text() == table


def test_statistics_without_a_finished_run_says_so(tmp_path: Path) -> None:
    done = run_stage("statistics", tmp_path / "study", tmp_path / "results")
    assert done.returncode == 1
    assert "results: no finished run to measure (train first)" in done.stderr


def test_the_draw_studys_test_stage_evaluates_finished_runs_on_the_whole_test_set(
    tmp_path: Path,
) -> None:
    """scripts/study_draw.sh test: vgp-eval on each finished run's last.pt, all test images at
    S = SAMPLES, added to its metrics.json; a run not finished (or a seed of SEEDS not yet
    trained) is skipped, and said so."""
    study = tmp_path / "study"
    # a tiny run tested on 4 of its test images at the end of training, as the train stage does
    train(compose_config([*TINY, "eval.subset=4", "eval.is_samples=3"]), study / "draw_vae_s0")
    write_run(
        study / "draw_vgp_default_s0", model="draw", inference="vgp", seed=0, status="running"
    )
    env = os.environ | {
        "STUDY_DIR": str(study), "SAMPLES": "5", "DATA_DIR": str(tmp_path), "SEEDS": "0 1"
    }  # fmt: skip

    def test_stage() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(REPO / "scripts" / "study_draw.sh"), "test"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = test_stage()
    assert done.returncode == 0, done.stderr
    assert "draw_vgp_default_s0 not finished" in done.stdout
    assert "draw_vae_s1 not finished" in done.stdout  # SEEDS: a seed not yet trained
    assert "testing draw_vae_s0 on the whole test set, S = 5" in done.stdout
    log = (study / "draw_vae_s0.test.log").read_text()
    assert "stopped" not in done.stdout, log
    record = json.loads((study / "draw_vae_s0" / "metrics.json").read_text())
    (whole,) = record["evaluations"]
    assert (whole["is_samples"], whole["subset"], whole["checkpoint"]) == (5, None, "last.pt")
    assert whole["n_examples"] > record["test"]["n_examples"] == 4  # all, not the first 4
    again = test_stage()  # the stage run again (a new session): nothing evaluated twice
    assert again.returncode == 0, again.stderr
    assert "draw_vae_s0 tested on the whole test set already" in again.stdout
    assert json.loads((study / "draw_vae_s0" / "metrics.json").read_text()) == record
