"""Collecting runs: the run folders under some roots, each read into a Run (in the tables) or
an Excluded (listed apart, with the reason), through metrics.json's typed records."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vgp_bench.compat import TRIVIAL_NLL, is_lost_snapshot
from vgp_bench.divergence import divergence_reason, is_finite_number
from vgp_bench.run.folder.lock_state import lock_holder
from vgp_bench.run.folder.metrics import (
    Evaluation,
    NotAnObjectError,
    RunRecord,
    family_structure,
    read_record,
)

DEFAULT_ROOTS = ("outputs", "multirun")
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


def evaluation_label(test: Evaluation, own: bool) -> str:
    """Which evaluation a row reads: vgp-train's own at the end of training (`own`), else
    vgp-eval's of the checkpoint it names."""
    if own:
        return OWN_EVALUATION
    return f"vgp-eval {test.checkpoint}" if test.checkpoint else "vgp-eval"


def tests_at_current_step(record: RunRecord) -> list[Evaluation]:
    """The run's test-set evaluations of a checkpoint of its current step (its last or its
    best), of any data: the end-of-training one and vgp-eval's (`evaluations`) while the run
    has not trained past them."""
    steps = record.steps
    candidates = [record.test] + [
        evaluation
        for evaluation in record.evaluations or []
        if (evaluation.run_steps if evaluation.has("run_steps") else steps) == steps
    ]
    return [
        test
        for test in candidates
        if test is not None and (test.split if test.has("split") else "test") == "test"
    ]


def current_test_evaluations(record: RunRecord) -> list[Evaluation]:
    """The run's test-set evaluations at its current step on its own data (the data it
    trained on)."""
    return [test for test in tests_at_current_step(record) if record.read_own_data(test)]


def chosen_evaluation(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The most precise current test-set evaluation: full test set first, then the most
    importance samples, then the most examples; the end-of-training one wins ties."""
    record = RunRecord(metrics)
    tests = current_test_evaluations(record)
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


def run_identity(record: RunRecord) -> str | None:
    """What makes two folders one run: its `run_id`, or for runs older than that, the record
    of its progress (history, wall time, seed, code), which no two runs share."""
    if record.run_id:
        return str(record.run_id)
    progress = {key: record.data.get(key) for key in ("history", "seed", "code_version")}
    if (
        not is_finite_number(record.wall_time_s)
        or not record.wall_time_s
        or not progress["history"]
    ):
        return None
    progress["wall_time_s"] = record.wall_time_s
    return "progress:" + hashlib.sha256(json.dumps(progress, sort_keys=True).encode()).hexdigest()


def furthest_first(runs: Sequence[Run]) -> list[Run]:
    """Runs ordered by how far they got: most steps, then most evaluations, then folder."""
    return sorted(
        runs,
        key=lambda run: (
            -int(run.record.steps or 0),
            -len(run.record.evaluations or []),
            str(run.folder),
        ),
    )


def once_each(runs: Sequence[Run], key: Any, why: str) -> tuple[list[Run], list[Excluded]]:
    """Of runs with one `key(run)` (None: unique), the furthest along is kept; the others
    come back as skipped, `why` naming the one kept."""
    groups: dict[Any, list[Run]] = {}
    kept: list[Run] = []
    for run in runs:
        value = key(run)
        if value is None:
            kept.append(run)
        else:
            groups.setdefault(value, []).append(run)
    skipped: list[Excluded] = []
    for group in groups.values():
        first, *others = furthest_first(group)
        kept.append(first)
        skipped += [
            Excluded(other.folder, "copy", f"{why} {first.folder}: counted once")
            for other in others
        ]
    return sorted(kept, key=lambda run: str(run.folder)), skipped


def one_per_run(runs: Sequence[Run]) -> tuple[list[Run], list[Excluded]]:
    """Each run once: of folders holding one run (a copy, a folder moved aside beside its
    original) the one furthest along is kept; the others are listed as skipped copies."""
    return once_each(runs, lambda run: run_identity(run.record), "the same run as")


def one_per_seed(runs: Sequence[Run]) -> tuple[list[Run], list[Excluded]]:
    """Runs of one table row, each seed once (a rerun of a seed is no new seed)."""
    return once_each(runs, lambda run: run.record.seed, "the same setting and seed as")


def unfinished_state(folder: Path, status: str, steps: int = 0) -> tuple[str, str]:
    """(status, reason) of a run recorded as running: live while a process holds its lock,
    else stopped (killed), resumable from its last.pt or restarted by the next start; one
    interrupted or preempted by a signal is resumable from the checkpoint it wrote. Steps
    recorded without a checkpoint are a study's snapshot, which copies no checkpoints (a run
    writes metrics.json at a step only after its last.pt)."""
    holder = lock_holder(folder)
    if holder is not None:
        return "running", f"running: {holder} holds its lock"
    if status == "running" and (folder / "checkpoints" / "last.pt").is_file():
        return "stopped, resumable", (
            "its process is gone (killed?): run the same command again to resume from "
            "checkpoints/last.pt"
        )
    if status == "running" and steps > 0:
        return "unfinished", (
            f"recorded at step {steps} with no checkpoint here: a study's snapshot, whose run "
            "trains or resumes in its own folder (or a run whose checkpoints were removed)"
        )
    if status == "running":
        return "stopped", (
            "its process is gone before its first checkpoint: the same command again restarts it"
        )
    if status in ("interrupted", "preempted") and (folder / "checkpoints" / "last.pt").is_file():
        return f"{status}, resumable", (
            "stopped by a signal (preempted: SLURM's, through submitit) after a checkpoint: the "
            "same command (or sweep) again resumes it from checkpoints/last.pt"
        )
    return status, f"run is {status}, not finished"


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
    if is_lost_snapshot(folder.name):
        return Excluded(
            folder, "lost", f"the last snapshot of a run lost with its run folder, epoch "
            f"{record.epochs_completed}: kept as a record, in no table"
        )  # fmt: skip
    if status != "finished":
        if record.error:
            return Excluded(folder, status, one_line(record.error))
        steps = int(record.steps or 0) if record.has("steps") else 0
        return Excluded(folder, *unfinished_state(folder, status, steps))
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
    own = chosen == record.data.get("test")  # vgp-train's own test, not one of `evaluations`
    return Run(folder, metrics, read_config(folder), evaluation_label(test, own))


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
