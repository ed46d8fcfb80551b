"""One process per run folder: an exclusive `flock` on `<run>/.lock` that names its holder.

The lock is taken for the run's life and the file says who holds it; a second process finds it
held and refuses with the holder's name. The kernel releases the lock when its holder dies (even
by kill -9), so a stale `.lock` file never blocks anyone.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from vgp_bench.errors import RunFolderError
from vgp_bench.files import open_no_follow
from vgp_bench.run.folder.lock_state import LOCK_NAME, read_holder

LOCK_RETRY_S = 0.5  # a probe holds the lock for microseconds: retry that long before refusing


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


WRITE_ELSEWHERE = "or write into another folder (hydra.run.dir=...)"


def busy_error(run_dir: Path, holder: str, advice: str = WRITE_ELSEWHERE) -> RunFolderError:
    """The refusal of a folder another process holds; `advice`: the way on for this command."""
    return RunFolderError(f"{run_dir} is in use by {holder}: wait for it to finish, {advice}")


def link_error(path: Path) -> RunFolderError:
    """The refusal of a run folder's file that is a symbolic link."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return RunFolderError(
        f"{path} is a symbolic link{target}: nothing is written through a link out of a run "
        "folder; remove the link and run again"
    )


def open_lock_file(path: Path, flags: int) -> int:
    """Open `<run>/.lock` without following a link (a link is refused, naming it)."""
    try:
        return open_no_follow(path, flags)
    except OSError:
        if path.is_symlink():
            raise link_error(path) from None
        raise


def refuse_if_locked(run_dir: Path, advice: str = WRITE_ELSEWHERE) -> None:
    """Raise naming the holder when another process holds the folder's lock (writes nothing)."""
    path = run_dir / LOCK_NAME
    try:
        descriptor = open_lock_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy_error(run_dir, read_holder(path), advice) from None
        fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def acquire_lock(run_dir: Path, command: str, advice: str = WRITE_ELSEWHERE) -> RunLock:
    """Take the folder's lock or raise naming its holder; the lock file says who holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    deadline = time.monotonic() + LOCK_RETRY_S
    while True:
        descriptor = open_lock_file(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            if time.monotonic() > deadline:
                raise busy_error(run_dir, read_holder(path), advice) from None
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
