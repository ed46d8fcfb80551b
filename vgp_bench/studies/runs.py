"""A study's committed runs: `results/<study>/runs/<run>/metrics.json` and `config.yaml`, read
once per process, and what the READMEs read of them (tests, validation curves, seeds, stops).

Every path is built from `RESULTS` at call time, so that a test can point it elsewhere.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vgp_bench.analysis.report.runs import chosen_evaluation

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout: vgp_bench/studies/../..
RESULTS = ROOT / "results"
STOPS = {"early_stopping": "stopped", "epochs": "cap", "max_steps": "step cap"}


def runs_dir(study: str) -> Path:
    """The folder of a study's committed runs."""
    return RESULTS / study / "runs"


@functools.cache
def load(study: str, run: str) -> dict[str, Any]:
    """A committed run's metrics.json, read once per process (callers only read it)."""
    return json.loads((runs_dir(study) / run / "metrics.json").read_text())


def has_run(study: str, run: str) -> bool:
    """Whether a run's record is committed under results/<study>/runs."""
    return (runs_dir(study) / run / "metrics.json").exists()


def test_of(study: str, run: str) -> dict[str, Any]:
    """The run's evaluation that vgp-report uses (the most precise one)."""
    evaluation = chosen_evaluation(load(study, run))
    if evaluation is None:
        raise ValueError(f"{study}/{run}: no test evaluation")
    return dict(evaluation)


def first_test(study: str, run: str) -> dict[str, Any] | None:
    """A finished run's end-of-training test (on the first test images), else None."""
    metrics = load(study, run) if has_run(study, run) else {}
    return metrics.get("test") if metrics.get("status") == "finished" else None


def run_setting(study: str, run: str, key: str) -> Any:
    """A setting of a committed run, as its config.yaml resolved it."""
    config = OmegaConf.load(runs_dir(study) / run / "config.yaml")
    return OmegaConf.select(config, key, throw_on_missing=True)


def valid_at(study: str, run: str, epoch: int) -> float | None:
    """The validation bound after `epoch`, None if the run did not get there."""
    for entry in load(study, run)["history"]:
        if entry["epoch"] == epoch:
            return float(entry["valid_bound"])
    return None


def best_valid(study: str, run: str) -> float:
    """The best validation bound (the checkpoint tested)."""
    return max(float(entry["valid_bound"]) for entry in load(study, run)["history"])


def last(study: str, run: str, key: str) -> float | None:
    """A per-epoch statistic at the run's last epoch (None: no epoch, or not recorded)."""
    history = load(study, run)["history"]
    value = history[-1].get(key) if history else None
    return None if value is None else float(value)


def best_so_far(study: str, run: str) -> dict[int, float]:
    """The best validation bound up to each epoch of a run."""
    best, curve = float("-inf"), {}
    for entry in load(study, run)["history"]:
        best = max(best, float(entry["valid_bound"]))
        curve[int(entry["epoch"])] = best
    return curve


@functools.cache
def valid_curve(study: str, run: str) -> dict[int, float]:
    """A run's validation bound by epoch."""
    return {int(e["epoch"]): float(e["valid_bound"]) for e in load(study, run)["history"]}


def best_epoch(metrics: dict[str, Any]) -> int:
    """The epoch of the best validation bound (recorded by runs since early stopping came)."""
    if metrics.get("best_epoch"):
        return int(metrics["best_epoch"])
    return int(max(metrics["history"], key=lambda entry: entry["valid_bound"])["epoch"])


def at_best_epoch(study: str, run: str, key: str) -> float | None:
    """A per-epoch statistic at the best validation epoch (the checkpoint tested)."""
    metrics = load(study, run)
    for entry in metrics["history"]:
        if entry["epoch"] == best_epoch(metrics) and key in entry:
            return float(entry[key])
    return None


def study_seeds(study: str, name: str) -> list[int]:
    """The seeds of a row with a committed run folder."""
    found = (
        re.fullmatch(rf"{re.escape(name)}_s(\d+)", path.name)
        for path in runs_dir(study).glob(f"{name}_s*")
    )
    return sorted(int(match[1]) for match in found if match)


def tested_seeds(study: str, name: str) -> list[int]:
    """The seeds of a row whose run finished and was tested."""
    records = {seed: load(study, f"{name}_s{seed}") for seed in study_seeds(study, name)}
    return [
        seed
        for seed, record in records.items()
        if record.get("status") == "finished" and chosen_evaluation(record) is not None
    ]


def lost_runs(study: str, name: str) -> list[str]:
    """The kept snapshots of a row's lost runs (`<row>_lost<N>_s<seed>`), by name."""
    return sorted(
        path.name
        for path in runs_dir(study).glob(f"{name}_lost*")
        if re.fullmatch(rf"{re.escape(name)}_lost\d+_s\d+", path.name)
    )


def row_and_seed(run: str) -> tuple[str, int]:
    """A run's row and seed: draw_vae_lost1_s0 -> (draw_vae_lost1, 0)."""
    row, seed = run.rsplit("_s", 1)
    return row, int(seed)


def training_hours(metrics: dict[str, Any]) -> float | None:
    """The hours a run spent in its training epochs (validation and tests not counted)."""
    seconds = metrics.get("wall_time_s")
    return seconds / 3600 if isinstance(seconds, int | float) and seconds > 0 else None


def stop_of(metrics: dict[str, Any]) -> str:
    """Why a finished run ended, in words (runs from before early stopping ran their epochs)."""
    reason = metrics.get("stop_reason") or "epochs"
    return STOPS.get(reason, reason)


def where_it_is(metrics: dict[str, Any]) -> str:
    """A run that has no test result yet, in words."""
    status = metrics.get("status")
    state = {"running": "training", "interrupted": "training", "finished": "finished, not tested"}
    return f"{state.get(status, status)}, epoch {metrics['epochs_completed']}"


def script_default(script: str, name: str) -> str:
    """The default `${NAME:-default}` a study script gives its variable `name`."""
    script_text = (ROOT / "scripts" / script).read_text()
    found = re.search(rf"\${{{name}:-([^}}]+)}}", script_text)
    if found is None:
        raise ValueError(f"scripts/{script}: no default `${{{name}:-...}}` for {name}")
    return found.group(1)


def read_json(study: str, name: str) -> Any:
    """results/<study>/<name> as JSON (an empty list when the file is not there)."""
    path = RESULTS / study / name
    return json.loads(path.read_text()) if path.is_file() else []
