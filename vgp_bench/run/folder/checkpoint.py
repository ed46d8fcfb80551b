"""Checkpoints: what a run saves to resume exactly (parameters, optimizer, shard generators, the
loop's state, the config), written atomically and loaded without running code from them."""

from __future__ import annotations

import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from vgp_bench.errors import ConfigError, CorruptDataError, MissingDataError
from vgp_bench.files import atomic_write

if TYPE_CHECKING:
    from vgp_bench.run.build import Components


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


def training_checkpoint(
    parts: Components, generator_states: list[Tensor], state: RunState, cfg: DictConfig
) -> dict[str, Any]:
    """Everything a resume needs to continue bit for bit."""
    return {
        "model": parts.model.state_dict(),
        "heads": parts.heads.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "generators": generator_states,  # one per data shard, in shard order
        "state": asdict(state),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def restore_training(parts: Components, checkpoint: dict[str, Any]) -> RunState:
    """Load parameters and optimizer from `checkpoint`; the loop's state to continue from."""
    parts.model.load_state_dict(checkpoint["model"])
    parts.heads.load_state_dict(checkpoint["heads"])
    # `foreach` says how the update is computed, not what: this process's choice stands
    foreach = [group.get("foreach") for group in parts.optimizer.param_groups]
    parts.optimizer.load_state_dict(checkpoint["optimizer"])
    for group, choice in zip(parts.optimizer.param_groups, foreach, strict=True):
        if "foreach" in group or choice is not None:
            group["foreach"] = choice
    state = RunState(**checkpoint["state"])
    parts.schedule.apply(state.step)
    return state


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


def load_initial_model(parts: Components, cfg: DictConfig) -> Path | None:
    """Start the model p(x, z) from the weights of `trainer.init_model` (a checkpoint of a run
    with the same model config); the heads keep their fresh initialization. Returns the path."""
    found = initial_model(cfg)
    if found is None:
        return None
    path, checkpoint = found
    try:
        parts.model.load_state_dict(checkpoint["model"])
    except RuntimeError as error:  # same config, other data shape
        raise ConfigError(
            f"trainer.init_model={path} does not fit this dataset's model "
            f"({str(error).splitlines()[0]}); pick a checkpoint trained on the same data"
        ) from error
    return path


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
