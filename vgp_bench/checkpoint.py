"""Atomic writes of checkpoints and JSON: a crash mid-write never leaves a torn file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _atomic_write(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """torch.save to a temporary file in the same folder, then rename over `path`."""
    _atomic_write(Path(path), lambda stream: torch.save(state, stream))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by save_checkpoint; a torn or foreign file gives a clear error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} not found")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:  # torch raises several types for corrupt files
        raise ValueError(
            f"checkpoint {path} is unreadable ({error}); delete it or pick another"
        ) from error


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write JSON atomically (sorted keys, indented)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=float).encode()
    _atomic_write(Path(path), lambda stream: stream.write(text))
