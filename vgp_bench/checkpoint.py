"""Atomic writes of checkpoints and JSON: a crash mid-write never leaves a torn file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from vgp_bench.data.store import atomic_file, atomic_write

__all__ = ["atomic_file", "load_checkpoint", "save_checkpoint", "write_json"]


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """torch.save to a temporary file in the same folder, then rename over `path`.

    A temporary file left by a killed process is removed at the run folder's next start.
    """
    atomic_write(path, lambda stream: torch.save(state, stream))


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
    atomic_write(path, lambda stream: stream.write(text))
