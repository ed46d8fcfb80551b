"""Collecting runs: the run folders under some roots, each read into a Run (in the tables) or
an Excluded (listed apart, with the reason), through metrics.json's typed records."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vgp_bench.divergence import divergence_reason, is_finite_number, trivial_nll
from vgp_bench.metrics import (
    Evaluation,
    NotAnObjectError,
    RunRecord,
    family_structure,
    read_record,
)

DEFAULT_ROOTS = ("outputs", "multirun")
# -log p(x) of the model that gives every pixel probability 1/2, for runs that did not record
# it (`trivial_nll` in metrics.json): D log 2 nats.
TRIVIAL_NLL = {"mnist": trivial_nll(784)}
OWN_EVALUATION = "end of training"


@dataclass(frozen=True)
class Run:
    """A finished, evaluated run: its folder, its metrics and its flattened resolved config."""

    folder: Path
    metrics: dict[str, Any]  # metrics.json's object; `test` is the evaluation the tables use
    config: dict[str, str]
    evaluation: str = OWN_EVALUATION  # which evaluation that is

    @property
    def record(self) -> RunRecord:
        """The metrics as a typed record."""
        return RunRecord(self.metrics)

    @property
    def test(self) -> Evaluation:
        """The evaluation the tables use."""
        return Evaluation(self.metrics["test"])


@dataclass(frozen=True)
class Excluded:
    """A run that is in no table, and why."""

    folder: Path
    status: str
    reason: str
    diverged: bool = False


def find_run_folders(roots: Iterable[Path]) -> list[Path]:
    """Every folder at or under `roots` with a metrics.json or a Hydra `.hydra/config.yaml`.

    A Hydra run folder without metrics.json is a run that stopped before training started.
    """
    found: set[Path] = set()
    for root in roots:
        markers = [root / "metrics.json", root / ".hydra" / "config.yaml"]
        markers += root.rglob("metrics.json")
        markers += (path for path in root.rglob("config.yaml") if path.parent.name == ".hydra")
        for marker in markers:
            if marker.is_file():
                run = marker.parent.parent if marker.parent.name == ".hydra" else marker.parent
                found.add(run.resolve())
    return sorted(found)


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys; leaves as JSON text so values compare exactly."""
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): json.dumps(node, sort_keys=True)}


def read_config(folder: Path) -> dict[str, str]:
    """The run's resolved config flattened (config.yaml, else .hydra/config.yaml), or {}."""
    for path in (folder / "config.yaml", folder / ".hydra" / "config.yaml"):
        if path.is_file():
            try:
                container = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            except Exception as error:  # a damaged config must not hide the run's numbers
                print(f"vgp-report: warning: cannot read {path}: {error}", file=sys.stderr)
                return {}
            return flatten(container) if isinstance(container, dict) else {}
    return {}


def one_line(text: Any) -> str:
    """A message squeezed onto one line."""
    return " ".join(str(text).split())


def evaluation_label(test: Evaluation) -> str:
    return f"vgp-eval {test.checkpoint}" if test.checkpoint else OWN_EVALUATION


def chosen_evaluation(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The most precise current test-set evaluation: full test set first, then the most
    importance samples, then the most examples; the end-of-training one wins ties.

    vgp-eval's evaluations (`evaluations`) count while the run has not trained past them.
    """
    record = RunRecord(metrics)
    steps = record.steps
    candidates = [record.test] + [
        evaluation
        for evaluation in record.evaluations or []
        if (evaluation.run_steps if evaluation.has("run_steps") else steps) == steps
    ]
    tests = [
        test
        for test in candidates
        if test is not None and (test.split if test.has("split") else "test") == "test"
    ]
    if not tests:
        return None
    split_sizes = None if record.dataset is None else record.dataset.split_sizes
    full = (split_sizes or {}).get("test")

    def precision(test: Evaluation) -> tuple:
        examples = test.n_examples if is_finite_number(test.n_examples) else 0
        samples = test.is_samples if is_finite_number(test.is_samples) else 0
        return (full is None or examples >= full, samples, examples)

    return max(tests, key=precision).data


def diverged(record: RunRecord, test: Evaluation) -> str | None:
    """Why the run counts as diverged (judged on the evaluation the tables would use)."""
    dataset = str(None if record.dataset is None else record.dataset.name)
    trivial = record.trivial_nll if record.has("trivial_nll") else TRIVIAL_NLL.get(dataset)
    reason = divergence_reason(test.data, trivial if is_finite_number(trivial) else None)
    own_test = record.test is not None and test.data is record.test.data
    if reason is None and record.diverged and own_test:
        reason = one_line(record.diverged_reason)
    return f"diverged: {reason}" if reason else None


def log_hint(folder: Path) -> str:
    """Where to look for what happened: the folder's non-empty logs, if any."""
    logs = sorted(path.name for path in folder.glob("*.log") if path.stat().st_size > 0)
    if logs:
        return f"see {', '.join(logs)} in its folder"
    return "it left no log"


def load_run(folder: Path, include_diverged: bool = False) -> Run | Excluded:
    """Read one run folder; anything that cannot go into a table comes back as Excluded."""
    if not (folder / "metrics.json").exists():
        return Excluded(
            folder,
            "no metrics",
            "no metrics.json: the run stopped before training started "
            f"(or is starting now); {log_hint(folder)}",
        )
    try:
        record = read_record(folder / "metrics.json")
    except NotAnObjectError as error:
        return Excluded(folder, "unreadable", str(error))
    except (OSError, ValueError) as error:
        return Excluded(folder, "unreadable", one_line(f"metrics.json: {error}"))
    status = str(record.status if record.has("status") else "unknown")
    if status != "finished":
        reason = one_line(record.error) if record.error else f"run is {status}, not finished"
        return Excluded(folder, status, reason)
    chosen = chosen_evaluation(record.data)
    if chosen is None:
        return Excluded(folder, status, "no test-set evaluation; run vgp-eval on its checkpoint")
    test = Evaluation(chosen)
    why_diverged = diverged(record, test)
    finite = is_finite_number(test.nll) and is_finite_number(test.bound_nll)
    if why_diverged and not (include_diverged and finite):
        return Excluded(folder, "diverged", why_diverged, diverged=True)
    for key, value in (("model", record.model), ("inference", record.inference)):
        if not value:
            return Excluded(folder, status, f"metrics.json has no {key!r}")
    metrics = {**record.data, "test": chosen}
    return Run(folder, metrics, read_config(folder), evaluation_label(test))


def structure_of(folder: Path, record: RunRecord) -> str | None:
    """The VGP structure a run recorded, or for runs older than that record, its config's."""
    if record.has("structure"):
        return record.structure
    try:
        config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
    except (OSError, ValueError):
        return None
    inference = config.get("inference") if isinstance(config, dict) else None
    return family_structure(inference) if isinstance(inference, dict) else None
