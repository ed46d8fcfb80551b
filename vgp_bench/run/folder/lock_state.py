"""Whether a run folder's lock is held, read without taking it (and without torch: vgp-report
tells a live run from a dead one with it); `vgp_bench.run.folder.lock` takes the lock."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = ".lock"


def read_holder(path: Path) -> str:
    """The first line of a lock file (who holds it), or "another process"."""
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "another process"


def lock_holder(run_dir: Path) -> str | None:
    """Who holds the folder's lock (a live process), or None when nobody does (reads only)."""
    path = run_dir / LOCK_NAME
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file (or a link, which no process of ours holds)
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(path)
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)
