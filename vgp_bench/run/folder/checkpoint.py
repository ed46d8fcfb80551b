"""Checkpoint files: the loop's state a run saves with every checkpoint, written atomically and
loaded without running code from them; `trainer.init_model`'s checkpoint, checked."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError
from vgp_bench.files import atomic_write


@dataclass
class RunState:
    """The loop's position and bookkeeping; saved with every checkpoint."""

    step: int = 0
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of the current epoch already done
    history: list[dict[str, Any]] = field(default_factory=list)  # metrics.EpochRecord objects
    best_valid_bound: float = -math.inf
    nonfinite_in_row: int = 0
    nonfinite_total: int = 0
    wall_time_s: float = 0.0
    eval_at_epochs: dict[str, dict[str, Any]] = field(default_factory=dict)  # EpochEvaluation
    epoch_bound_sum: float = 0.0  # training bounds summed over this epoch's finite steps
    epoch_bound_count: int = 0
    epoch_end_pending: bool = False  # an epoch ended but its validation/images are not done
    best_epoch: int = 0  # the epoch of best_valid_bound (best.pt); 0 before any validation
    gain_reference: float = -math.inf  # early stopping: the bound at the last gain
    epochs_without_gain: int = 0  # early stopping: epochs since a gain of min_delta
    stop_reason: str | None = None  # early_stopping once it fired; else the budget decides


def initial_model(cfg: DictConfig) -> tuple[Path, dict[str, Any]] | None:
    """`trainer.init_model`'s path and checkpoint, checked to hold this config's model (read
    only: `train` calls it with the other settings, before anything is written)."""
    source = cfg.trainer.get("init_model")
    if not source:
        return None
    path = Path(str(source)).expanduser().resolve()
    if path.is_dir():
        raise ConfigError(
            f"trainer.init_model={path} is a folder; give a checkpoint file, e.g. "
            f"{path / 'checkpoints' / 'best.pt'}"
        )
    try:
        checkpoint = load_checkpoint(path)
    except FileNotFoundError as error:
        raise ConfigError(
            f"trainer.init_model={path} not found; give the path of a run's "
            "checkpoints/best.pt (or last.pt)"
        ) from error
    except ValueError as error:
        raise ConfigError(f"trainer.init_model: {error}") from error
    saved_config = checkpoint.get("config")
    saved_model = saved_config.get("model") if isinstance(saved_config, dict) else None
    current_model = OmegaConf.to_container(cfg.model, resolve=True)
    if saved_model != current_model or "model" not in checkpoint:
        raise ConfigError(
            f"trainer.init_model={path} holds another model than model={cfg.model.name} with "
            "these settings; pick a checkpoint of a run with the same model config"
        )
    return path, checkpoint


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """torch.save to a temporary file in the same folder, then rename over `path`.

    A temporary file left by a killed process is removed at the run folder's next start.
    """
    buffer = io.BytesIO()  # serialized first: a full disk is then an OSError (ENOSPC) of
    torch.save(state, buffer)  # the write, not torch's "unexpected pos"
    atomic_write(path, lambda stream: stream.write(buffer.getbuffer()))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by save_checkpoint without ever running code from it.

    `weights_only=True`: the unpickler accepts tensors, numbers, strings, lists, tuples and
    dicts, and refuses anything else (a pickle that calls `os.system` is refused unexecuted).
    A torn, foreign or crafted file gives a one-line error naming the file.
    """
    path = Path(path)
    if path.is_dir():
        raise MissingDataError(f"checkpoint {path} is a folder, not a checkpoint file")
    if not path.is_file():
        raise MissingDataError(f"checkpoint {path} not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises several types for corrupt or unsafe files
        reason = refusal_reason(str(error)) or type(error).__name__
        raise CorruptDataError(
            f"checkpoint {path} is unreadable or not a vgp-bench checkpoint ({reason}); "
            "nothing in it was executed; delete it or pick another"
        ) from error
    if not isinstance(state, dict):
        raise CorruptDataError(
            f"checkpoint {path} holds a {type(state).__name__}, not a vgp-bench checkpoint; "
            "delete it or pick another"
        )
    return state


def refusal_reason(text: str) -> str:
    """Why torch refused a file, in its own words, less its advice to load it unsafely."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        detail = [
            line
            for line in lines[1:]
            if "weights_only" not in line and not line.startswith("Check the documentation")
        ]
        found = f": {detail[0]}" if detail else ""
        return f"it holds objects other than tensors and plain values{found}"
    return lines[0].split(". ")[0] if lines else ""


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write JSON atomically (sorted keys, indented)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=float).encode()
    atomic_write(path, lambda stream: stream.write(text))
