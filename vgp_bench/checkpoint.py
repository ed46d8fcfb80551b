"""Atomic writes of checkpoints and JSON: a crash mid-write never leaves a torn file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def current_umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write: Any) -> None:
    """Write through `.<name>.*.tmp` in the same folder, then rename over `path`.

    The file gets the usual permissions, 0666 less the umask (mkstemp alone makes 0600).
    A temporary file left by a killed process is removed at the run folder's next start.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~current_umask())
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for writers that need a name (h5py); renamed on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(handle, 0o666 & ~current_umask())
    os.close(handle)
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """torch.save to a temporary file in the same folder, then rename over `path`."""
    _atomic_write(Path(path), lambda stream: torch.save(state, stream))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by save_checkpoint without ever running code from it.

    `weights_only=True`: the unpickler accepts tensors, numbers, strings, lists, tuples and
    dicts, and refuses anything else (a pickle that calls `os.system` is refused unexecuted).
    A torn, foreign or crafted file gives a one-line error naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or unsafe files
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"checkpoint {path} is unreadable or not a vgp-bench checkpoint ({reason}); "
            "nothing in it was executed; delete it or pick another"
        ) from error
    if not isinstance(state, dict):
        raise ValueError(
            f"checkpoint {path} holds a {type(state).__name__}, not a vgp-bench checkpoint; "
            "delete it or pick another"
        )
    return state


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write JSON atomically (sorted keys, indented)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=float).encode()
    _atomic_write(Path(path), lambda stream: stream.write(text))
