"""Run-folder guards: one process per folder (a lock naming its holder), no orphans, a log.

A run folder is written by one process at a time. `claim` takes an exclusive `flock` on
`<run>/.lock` for the run's life and writes who holds it; a second process finds the lock
held and refuses with the holder's name. The kernel releases the lock when its holder dies
(even by kill -9), so a stale `.lock` file never blocks anyone. Everything that can refuse a
run (`refuse_if_locked`, `check_fresh_start`, `resume_changes`) reads and never writes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from vgp_bench.runtime import ConfigError

LOCK_NAME = ".lock"
LOG_NAME = "train.log"
# Files whose presence means the folder holds (part of) a run.
RUN_MARKERS = ("metrics.json", "config.yaml", "checkpoints")
LOCK_RETRY_S = 0.5  # a probe holds the lock for microseconds: retry that long before refusing

# Keys a resumed run may change: none of them alters what the run computes (the training
# trajectory); `eval` is every evaluation setting. Any other difference refuses the resume.
RESUMABLE_KEYS = (
    "device",
    "data_dir",
    "experiment_name",
    "eval",
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.log_every",
    "trainer.checkpoint_every",
    "trainer.valid_samples",
    "trainer.valid_subset",
    "trainer.eval_at_epochs",
    "trainer.image_every",
    "trainer.max_nonfinite",
    "trainer.progress",
    "trainer.resume",
    "trainer.move_aside",
    "trainer.compile",
    "trainer.ddp_backend",
    "trainer.find_unused_parameters",
    "trainer.diagnostics_examples",
    "trainer.compile_mode",
    "trainer.gpu_memory_fraction",
)

# Keys added to the configs after runs already existed: a run whose saved config lacks one
# resumes when the key holds the value that computes what the older code computed (ANY: the
# key changes nothing unless another, older key turns it on).
ANY = object()
NEWER_KEYS: dict[str, Any] = {
    "trainer.objective": "elbo",
    "inference.prior_mean": "zero",
    "inference.paper_auxiliary": "factorized",
    "inference.warp": "gp",
    "inference.noise_ratio": ANY,  # read only by mean_field_scale=tied, newer itself
    "inference.init_noise_scale": ANY,  # read only by prior_mean=identity
}


def is_older_default(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`, absent from a run's saved config, holds the value of the older code."""
    if key in old or key not in NEWER_KEYS:
        return False
    compatible = NEWER_KEYS[key]
    return compatible is ANY or new.get(key) == compatible


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked; nothing in it was changed."""


@dataclass
class RunLock:
    """An exclusive flock on `<run>/.lock`, held until `release`."""

    path: Path
    descriptor: int

    def release(self) -> None:
        """Remove the lock file, then unlock (a waiter then finds its inode gone and retries)."""
        self.path.unlink(missing_ok=True)
        fcntl.flock(self.descriptor, fcntl.LOCK_UN)
        os.close(self.descriptor)


def holder_description(command: str) -> str:
    """One line naming this process: what, pid, host, since when."""
    started = datetime.now().astimezone().isoformat(timespec="seconds")
    return f"{command} (pid {os.getpid()} on {socket.gethostname()}, since {started})"


def read_holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "another process"


def busy_error(run_dir: Path, holder: str) -> RunFolderError:
    return RunFolderError(
        f"{run_dir} is in use by {holder}: wait for it to finish, or write into another "
        "folder (hydra.run.dir=...)"
    )


def refuse_if_locked(run_dir: Path) -> None:
    """Raise naming the holder when another process holds the folder's lock (writes nothing)."""
    path = run_dir / LOCK_NAME
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy_error(run_dir, read_holder(path)) from None
        fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def acquire_lock(run_dir: Path, command: str) -> RunLock:
    """Take the folder's lock or raise naming its holder; the lock file says who holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    deadline = time.monotonic() + LOCK_RETRY_S
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            if time.monotonic() > deadline:
                raise busy_error(run_dir, read_holder(path)) from None
            time.sleep(0.02)
            continue
        try:  # the previous holder may have removed the file between our open and flock
            same_file = os.stat(path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:
            os.close(descriptor)
            continue
        os.ftruncate(descriptor, 0)
        os.write(descriptor, (holder_description(command) + "\n").encode())
        return RunLock(path, descriptor)


def remove_orphans(run_dir: Path) -> list[Path]:
    """Delete `.<name>.*.tmp` files an atomic write left when its process was killed."""
    removed = []
    for folder in (run_dir, run_dir / "checkpoints"):
        if folder.is_dir():
            for path in folder.glob(".*.tmp"):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def holds_run(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in RUN_MARKERS)


def recorded_status(run_dir: Path) -> str:
    """`status` and `steps` of the folder's metrics.json, in words, for messages."""
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        return f"{metrics.get('status', 'unknown')} after {metrics.get('steps', '?')} steps"
    except (OSError, ValueError, AttributeError):
        return "without readable metrics.json"


def check_fresh_start(run_dir: Path, resume: bool, move_aside: bool) -> Path | None:
    """Where the old run goes when a new one starts in `run_dir`; raise if it must not start.

    A folder holding a run is never overwritten: with `trainer.resume=false` (or nothing to
    resume from) the run is refused, unless `trainer.move_aside=true` asks to move the old
    files to a sibling folder first. Returns that sibling (not yet created), or None.
    """
    if not holds_run(run_dir):
        return None
    if move_aside:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return unique_path(run_dir.with_name(f"{run_dir.name}.replaced-{stamp}"))
    why = (
        "trainer.resume=false would overwrite it"
        if not resume
        else "it has no checkpoints/last.pt to resume from"
    )
    raise RunFolderError(
        f"{run_dir} holds a run ({recorded_status(run_dir)}) and {why}: write into a new "
        "folder (hydra.run.dir=...), or pass trainer.move_aside=true to move the old run "
        "to a sibling folder first"
    )


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


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; lists and scalars are leaves."""
    if isinstance(node, dict) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): node}


def is_resumable_key(key: str) -> bool:
    return any(key == allowed or key.startswith(allowed + ".") for allowed in RESUMABLE_KEYS)


def resume_changes(
    saved: dict[str, Any], current: dict[str, Any], run_dir: Path
) -> dict[str, list[Any]]:
    """The changed keys a resume accepts, `{key: [old, new]}`; raise on any other change."""
    old, new = flatten(saved), flatten(current)
    changed = sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))
    refused = [
        key for key in changed if not (is_resumable_key(key) or is_older_default(key, old, new))
    ]
    if refused:
        shown = ", ".join(f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in refused[:4])
        more = f" and {len(refused) - 4} more" if len(refused) > 4 else ""
        top = refused[0].split(".")[0]
        raise RunFolderError(
            f"{run_dir} holds a run with a different '{top}' config ({shown}{more}); these "
            "change what the run computes: resume with the same settings, or write into a "
            "new folder (hydra.run.dir=...)"
        )
    return {key: [old.get(key), new.get(key)] for key in changed}


# ---------------------------------------------------------------------------- the run's log

RUN_LOGGER = "vgp_bench.run"


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
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    try:
        yield logger
    finally:
        logger.removeHandler(handler)
        handler.close()


@contextmanager
def claimed(run_dir: Path, command: str, log_name: str = LOG_NAME) -> Iterator[logging.Logger]:
    """Hold the folder's lock and log into the folder (the log file opens at its first
    record, so a folder can still be moved aside before that)."""
    lock = acquire_lock(run_dir, command)
    try:
        with run_log(run_dir / log_name) as logger:
            yield logger
    finally:
        lock.release()


def clear_orphans(run_dir: Path, logger: logging.Logger) -> None:
    """`remove_orphans`, logged; only while holding the folder's lock."""
    for orphan in remove_orphans(run_dir):
        logger.info("removed %s, left by a write that was killed", orphan.name)


def log_failure(logger: logging.Logger, error: BaseException, expected: bool = False) -> str:
    """Log `error` with its traceback; return it as one line for metrics.json.

    An `expected` error (bad input, a diverging run) is its message; any other is prefixed
    with its type.
    """
    logger.error("failed", exc_info=(type(error), error, error.__traceback__))
    return one_line_error(error, expected)


def one_line_error(error: BaseException, expected: bool = False) -> str:
    text = " ".join(str(error).split())
    if expected:
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
