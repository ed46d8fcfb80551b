"""A run folder: what a start may do to it (fresh start, exact resume, or refusal), one process
at a time (`lock`) with its log, and what a training run writes there (`RunFolder`).

Everything that can refuse a run (`refuse_if_locked`, `check_fresh_start`, `resume_changes`,
`plan_run`) reads and never writes: a refused start changes no byte of the folder.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vgp_bench.data.base import DatasetBundle
from vgp_bench.divergence import divergence
from vgp_bench.errors import RunFolderError
from vgp_bench.files import NoFollowFileHandler, atomic_write_text, orphaned_temporaries
from vgp_bench.run.config.keys import (  # noqa: F401 (run_folder.NEWER_KEYS: the documented home)
    ANY,
    NEWER_KEYS,
    RESUMABLE_KEYS,
    is_older_default,
    is_resumable_key,
)
from vgp_bench.run.folder.checkpoint import load_checkpoint, save_checkpoint
from vgp_bench.run.folder.folder_checks import (  # noqa: F401 (imported from here by the commands)
    LOG_NAME,
    RUN_SUBFOLDERS,
    check_run_folder,
    refuse_foreign_folder,
    refuse_links,
)
from vgp_bench.run.folder.lock import LOCK_NAME, WRITE_ELSEWHERE, acquire_lock, refuse_if_locked
from vgp_bench.run.folder.metrics import RunRecord, read_record, write_record
from vgp_bench.run.folder.resume_policy import (
    load_best_checkpoint,
    load_last_checkpoint,
    refuse_data_change,
    refuse_evaluation_changes,
    resume_changes,
)
from vgp_bench.run.folder.run_identity import (  # noqa: F401 (check_record: imported from here)
    IDENTITY_KEY,
    check_record,
    checkpoint_identity,
    holds_run,
    refuse_foreign_checkpoint,
)
from vgp_bench.run.loggers import RunLogger, build_loggers
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import code_version


def remove_orphans(run_dir: Path) -> list[Path]:
    """Delete the temporary files atomic writes left when their process was killed."""
    removed = []
    for folder in (run_dir, run_dir / "checkpoints"):
        for path in orphaned_temporaries(folder):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def recorded_status(run_dir: Path) -> str:
    """`status` and `steps` of the folder's metrics.json, in words, for messages."""
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        return f"{metrics.get('status', 'unknown')} after {metrics.get('steps', '?')} steps"
    except (OSError, ValueError, AttributeError):
        return "without readable metrics.json"


def check_fresh_start(run_dir: Path, move_aside: bool) -> Path | None:
    """Where the old run goes when a new one starts in `run_dir`; raise if it must not start.

    A folder holding a run is never overwritten: with `trainer.resume=false` the run is
    refused, unless `trainer.move_aside=true` asks to move the old files to a sibling folder
    first. Returns that sibling (not yet created), or None.
    """
    if not holds_run(run_dir):
        return None
    if move_aside:
        return sibling_path(run_dir, "replaced")
    raise RunFolderError(
        f"{run_dir} holds a run ({recorded_status(run_dir)}) and trainer.resume=false would "
        "overwrite it: write into a new folder (hydra.run.dir=...), or pass "
        "trainer.move_aside=true to move the old run to a sibling folder first"
    )


def sibling_path(run_dir: Path, why: str) -> Path:
    """A free sibling `<folder>.<why>-<time>` for the folder's old run (not created)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return unique_path(run_dir.with_name(f"{run_dir.name}.{why}-{stamp}"))


def unique_path(path: Path) -> Path:
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}-{number}")
    return candidate


def move_aside(run_dir: Path, destination: Path) -> None:
    """Move every entry of `run_dir` but the lock into `destination` (same file system)."""
    destination.mkdir(parents=True)
    for entry in sorted(run_dir.iterdir()):
        if entry.name != LOCK_NAME:
            entry.rename(destination / entry.name)


@dataclass
class RunPlan:
    """What a start does to its run folder, decided before anything is written."""

    checkpoint: dict[str, Any] | None = None  # to resume from
    changes: dict[str, list[Any]] = field(default_factory=dict)  # accepted config changes
    move_to: Path | None = None  # where the folder's old run goes first
    restarted: bool = False  # the old run is an attempt that never wrote last.pt


def agreed_plan(
    context: DistributedContext,
    cfg: DictConfig,
    run_dir: Path,
    total_shards: int,
    holding_lock: bool,
    data_info: dict[str, Any] | None = None,
) -> RunPlan:
    """`plan_run` on rank 0: its refusal is raised on every rank, and every rank gets the
    checkpoint to resume from."""
    plan, refusal = None, None
    if context.is_main:
        try:
            plan = plan_run(cfg, run_dir, total_shards, holding_lock, data_info)
        except Exception as error:  # the other ranks must hear of it, or they wait forever
            refusal = error
    message = context.broadcast_object(None if refusal is None else str(refusal))
    if refusal is not None:
        raise refusal
    if message is not None:
        raise RunFolderError(message)
    resume = context.broadcast_object(plan is not None and plan.checkpoint is not None)
    if not context.is_main:
        last = run_dir / "checkpoints" / "last.pt"
        plan = RunPlan(load_checkpoint(last, map_location="cpu") if resume else None)
    assert plan is not None
    return plan


def plan_run(
    cfg: DictConfig,
    run_dir: Path,
    total_shards: int,
    holding_lock: bool,
    data_info: dict[str, Any] | None = None,
) -> RunPlan:
    """Decide how a start treats `run_dir`, or refuse; reads the folder and writes nothing.

    Refused: a folder inside another run's folder, with files but no run, with a file that
    is a symbolic link or an entry of the wrong kind, with a metrics.json that is not a
    run's record, or read-only (`check_run_folder`); a folder another process holds; a
    checkpoint that is not this run's (`refuse_foreign_checkpoint`); a resume whose config differs
    in a key that changes what the run computes, or whose data (`data_info`, once loaded)
    is not the data it trained on, or whose data shards differ, or a finished
    run asked to evaluate otherwise with nothing to train; any start that would overwrite a
    run (see `check_fresh_start`). A run that never wrote last.pt restarts from scratch, its
    attempt moved to a sibling folder.
    """
    check_run_folder(run_dir)
    if not holding_lock:
        refuse_if_locked(run_dir)
    current = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(current, dict)
    trainer = cfg.trainer
    last = run_dir / "checkpoints" / "last.pt"
    if trainer.resume and (last.exists() or last.is_symlink()):
        checkpoint = load_last_checkpoint(last)
        refuse_foreign_checkpoint(last, checkpoint, run_dir)  # before its config is compared
        best = run_dir / "checkpoints" / "best.pt"
        if best.is_file():  # the final test may evaluate it
            refuse_foreign_checkpoint(best, load_best_checkpoint(best), run_dir)
        changes = resume_changes(checkpoint["config"], current, run_dir)
        if data_info is not None:
            refuse_data_change(run_dir, data_info)
        saved_shards = len(checkpoint["generators"])
        if saved_shards != total_shards:
            raise RunFolderError(
                f"{last} was written with {saved_shards} data shards (ranks x "
                f"trainer.micro_batches) but this run has {total_shards}; resume with the "
                "same number of processes and micro-batches"
            )
        refuse_evaluation_changes(run_dir, checkpoint["state"], cfg, changes)
        return RunPlan(checkpoint, changes)
    if trainer.resume and holds_run(run_dir):
        # an attempt that never wrote last.pt (it failed, or its last.pt was removed): there
        # is nothing to resume, so the run restarts from scratch; the attempt's files (its
        # record, a best.pt) move to a sibling folder first, never overwritten
        return RunPlan(move_to=sibling_path(run_dir, "attempt"), restarted=True)
    move_to = check_fresh_start(run_dir, bool(trainer.get("move_aside")))
    return RunPlan(move_to=move_to)


# ---------------------------------------------------------------------------- the run's log

RUN_LOGGER = "vgp_bench.run_log"  # not a module name: no module logger is its child


def run_logger() -> logging.Logger:
    """The logger of run folders: its records go only to the folder's log file."""
    logger = logging.getLogger(RUN_LOGGER)
    if not logger.handlers:  # without a folder to log into, records go nowhere (not stderr)
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


@contextmanager
def run_log(path: Path) -> Iterator[logging.Logger]:
    """Append the run logger's records to `path` while the context lasts."""
    logger = run_logger()
    handler = NoFollowFileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


@contextmanager
def claimed(
    run_dir: Path, command: str, log_name: str = LOG_NAME, advice: str = WRITE_ELSEWHERE
) -> Iterator[logging.Logger]:
    """Hold the folder's lock and log into the folder (the log file opens at its first
    record, so a folder can still be moved aside before that)."""
    lock = acquire_lock(run_dir, command, advice)
    try:
        with run_log(run_dir / log_name) as logger:
            yield logger
    finally:
        lock.release()


def clear_orphans(run_dir: Path, logger: logging.Logger) -> None:
    """`remove_orphans`, logged; only while holding the folder's lock."""
    for orphan in remove_orphans(run_dir):
        logger.info("removed %s, left by a write that was killed", orphan.name)


class RunFolder:
    """The folder of one training run as rank 0 writes it: lock and log, the start, config,
    checkpoints and metrics.json (the other ranks take part in the collectives only)."""

    def __init__(
        self, path: Path, context: DistributedContext, hydra_files: dict[str, Any]
    ) -> None:
        self.path = path
        self.checkpoints = path / "checkpoints"
        self.context = context
        self.hydra_files = hydra_files  # written into .hydra/ once the run may start
        self.record = RunRecord()  # metrics.json
        self.log = run_logger()

    @contextmanager
    def claimed(self) -> Iterator[logging.Logger]:
        """Hold the folder's lock and log into its train.log meanwhile (rank 0)."""
        claim = claimed(self.path, "vgp-train") if self.context.is_main else nullcontext(self.log)
        with claim as log:
            self.log = log
            yield log

    def start(self, cfg: DictConfig, total_shards: int, data: DatasetBundle) -> RunPlan:
        """Plan the start (refusing on every rank); then move the old run aside if asked,
        remove orphaned temporary files, and read back the record of a run resumed."""
        plan = agreed_plan(self.context, cfg, self.path, total_shards, True, data.info)
        if not self.context.is_main:
            return plan
        if plan.move_to is not None:
            move_aside(self.path, plan.move_to)
            what = "attempt (it never wrote checkpoints/last.pt)" if plan.restarted else "run"
            message = f"moved the folder's previous {what} to {plan.move_to}"
            print(f"vgp-train: {message}; starting from scratch", file=sys.stderr)
            self.log.info(message)
            self.record.previous_attempt = str(plan.move_to)
        clear_orphans(self.path, self.log)
        previous = self.path / "metrics.json"
        if plan.checkpoint is not None and previous.exists():
            self.record = read_record(previous)
        if not self.record.run_id:  # drawn now: a failure from here on is this run's record
            self.record.run_id = uuid.uuid4().hex
        return plan

    def describe(self, cfg: DictConfig, data: DatasetBundle, plan: RunPlan, step: int) -> None:
        """Record what the run is (and the config changes a resume accepted)."""
        record = self.record
        record.describe(cfg, {**data.info, "split_sizes": data.split_sizes()}, code_version())
        if plan.changes:
            changes = {"step": step, "changes": plan.changes}
            record.resume_changes = [*(record.resume_changes or []), changes]
        started = "resumed" if plan.checkpoint is not None else "started"
        changed = f"; changed: {plan.changes}" if plan.changes else ""
        self.log.info("%s at step %d in %s%s", started, step, self.path, changed)

    def begin(self, cfg: DictConfig, step: int) -> RunLogger:
        """Write config.yaml and Hydra's .hydra/ (after metrics.json, which makes the folder
        the run's), and open the loggers `cfg.logger` chooses (rank 0)."""
        if not self.context.is_main:
            return RunLogger()
        for name, node in self.hydra_files.items():  # atomic: never through a link
            atomic_write_text(self.path / ".hydra" / name, OmegaConf.to_yaml(node))
        atomic_write_text(self.path / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        config = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(config, dict)
        return build_loggers(config.get("logger"), self.path, config, step, self.log)

    def finish(self, x_shape: tuple[int, ...]) -> None:
        """Record whether the run diverged (judged on its test result)."""
        test = self.record.test
        self.record.update(divergence(None if test is None else test.data, x_shape))
        if self.record.diverged:
            self.log.warning("diverged: %s", self.record.diverged_reason)

    def divergence_advice(self) -> str:
        """What a diverged run keeps and how to go on: only files that exist are named."""
        last = self.checkpoints / "last.pt"
        if last.is_file():
            return (
                f"the last good checkpoint is {last}; to start again with a lower "
                "optim.optimizer.lr or with trainer.grad_clip, write into a new folder "
                "(hydra.run.dir=...) or pass trainer.resume=false trainer.move_aside=true (this "
                "run is moved to a sibling folder)"
            )
        return (
            "no checkpoint was written; lower optim.optimizer.lr or set trainer.grad_clip "
            "and run again (this attempt is then moved to a sibling folder)"
        )

    def report_stop(self, signal_name: str) -> None:
        """Say that a stop signal left a checkpoint to resume from."""
        message = (
            f"{signal_name}: checkpoint saved in {self.checkpoints}; run the same command "
            "again to resume"
        )
        self.log.info(message)
        if self.context.is_main:
            print(f"vgp-train: {message}", file=sys.stderr)

    def save_checkpoint(self, checkpoint: dict[str, Any], name: str) -> None:
        """Save `checkpoint` with the identity of the run that writes it (rank 0)."""
        if self.context.is_main:
            checkpoint[IDENTITY_KEY] = checkpoint_identity(self.record)
            save_checkpoint(checkpoint, self.checkpoints / name)

    def write_record(self) -> None:
        if self.context.is_main:
            write_record(self.record, self.path / "metrics.json")
