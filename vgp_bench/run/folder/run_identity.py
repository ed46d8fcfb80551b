"""Whose a folder and a checkpoint are: a folder is a run's only when its metrics.json says so
(a record with the run's `run_id` and `status`), a folder inside a run folder is no run's, and a
checkpoint carries the identity of the run that wrote it (run_id, model, inference, seed, data),
so that a checkpoint of another run is never resumed or evaluated as this one's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vgp_bench.data_identity import data_identity
from vgp_bench.errors import RunFolderError
from vgp_bench.run.folder.metrics import RunRecord, read_record

RECORD_NAME = "metrics.json"
RUN_STATUSES = ("running", "interrupted", "preempted", "failed", "finished")
IDENTITY_KEY = "run"  # the checkpoint's entry holding its run's identity


def is_run_record(record: RunRecord) -> bool:
    """Whether a metrics.json record is a run's: a status this package writes, and a run_id
    (a record older than run_id has its progress in `steps` instead)."""
    if record.status not in RUN_STATUSES:
        return False
    return isinstance(record.run_id, str) or (not record.has("run_id") and record.has("steps"))


def holds_run(run_dir: Path) -> bool:
    """Whether `run_dir` is a run's folder: its metrics.json is a readable run record."""
    path = run_dir / RECORD_NAME
    if path.is_symlink() or not path.is_file():
        return False
    try:
        return is_run_record(read_record(path))
    except (OSError, ValueError):
        return False


def check_record(run_dir: Path) -> None:
    """Raise naming the folder's metrics.json when it is unreadable or not a run's record
    (reads only); a folder without one passes."""
    path = run_dir / RECORD_NAME
    if not (path.exists() or path.is_symlink()):
        return
    try:
        record = read_record(path)
    except (OSError, ValueError) as error:
        raise RunFolderError(
            f"{path} is unreadable ({' '.join(str(error).split())}): restore it from a backup, "
            "or move it out of the folder to go on without the run's record"
        ) from None
    if not is_run_record(record):
        raise RunFolderError(
            f"{path} is not a run's record (a run's names its run_id and a status among "
            f"{', '.join(RUN_STATUSES)}, got status {record.status!r}): this folder holds no "
            "run; pick another folder, or restore the run's own metrics.json"
        )


def enclosing_run(folder: Path) -> Path | None:
    """The run folder that `folder` lies inside (not `folder` itself), or None."""
    path = Path(folder).absolute()
    for ancestor in path.parents:
        if holds_run(ancestor):
            return ancestor
    return None


def refuse_nested(folder: Path, what: str = "a run folder") -> None:
    """Raise when `folder` lies inside a run folder: a run's folder holds only its own files."""
    outer = enclosing_run(folder)
    if outer is not None:
        raise RunFolderError(
            f"{folder} lies inside the run folder {outer}, which holds only its own run's "
            f"files: {what} goes outside any run folder; pick another folder"
        )


# ---------------------------------------------------------------------- checkpoint identity


def checkpoint_identity(record: RunRecord) -> dict[str, Any]:
    """What a checkpoint says about the run that wrote it, from the run's record."""
    dataset = record.dataset
    return {
        "run_id": record.run_id,
        "model": record.model,
        "inference": record.inference,
        "seed": record.seed,
        "data": data_identity(dataset.to_json()) if dataset is not None else {},
    }


def claimed_identity(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The identity a checkpoint states, or (older code wrote none) what its config says."""
    identity = checkpoint.get(IDENTITY_KEY)
    if isinstance(identity, dict):
        return identity
    config = checkpoint.get("config")
    config = config if isinstance(config, dict) else {}

    def name(group: str) -> Any:
        node = config.get(group)
        return node.get("name") if isinstance(node, dict) else None

    return {"model": name("model"), "inference": name("inference"), "seed": config.get("seed")}


def describe(identity: dict[str, Any]) -> str:
    """A run's identity in a few words, for messages."""
    run_id = identity.get("run_id")
    words = f"{identity.get('model')} + {identity.get('inference')}, seed {identity.get('seed')}"
    return f"run {run_id[:8]} ({words})" if isinstance(run_id, str) else f"a run of {words}"


def identity_problem(checkpoint: dict[str, Any], record: RunRecord) -> str | None:
    """Why `checkpoint` is not the checkpoint of the run `record` describes, or None.

    Its run_id decides where both state one; a checkpoint written by older code (no identity)
    is this run's when its config's model, inference and seed are the record's; so is a
    record older than run_id whose fields agree with the checkpoint's."""
    claimed = claimed_identity(checkpoint)
    own = checkpoint_identity(record)
    if isinstance(claimed.get("run_id"), str) and isinstance(own["run_id"], str):
        differs = claimed["run_id"] != own["run_id"]  # the data: `refuse_data_change`
    else:
        differs = any(
            claimed.get(key) is not None
            and own[key] is not None
            and str(claimed[key]) != str(own[key])
            for key in ("model", "inference", "seed")
        )
    if not differs:
        return None
    return f"it was written by {describe(claimed)}, this folder holds {describe(own)}"


def refuse_foreign_checkpoint(path: Path, checkpoint: dict[str, Any], run_dir: Path) -> None:
    """Raise when the checkpoint at `path` is not the checkpoint of the run in `run_dir`
    (a copy of another run's best.pt, two runs' last.pt swapped); reads only."""
    record_path = run_dir / RECORD_NAME
    if not record_path.is_file():
        return
    problem = identity_problem(checkpoint, read_record(record_path))
    if problem:
        raise RunFolderError(
            f"{path} is not this run's checkpoint ({problem}): put the run's own checkpoint "
            "back, or use that checkpoint in its own run folder"
        )
