"""What a training checkpoint holds of the components (parameters, optimizer, shard generators,
the loop's state, the config), and how they come back from one: a resume, `trainer.init_model`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from vgp_bench.errors import ConfigError
from vgp_bench.run.folder.checkpoint import RunState, initial_model
from vgp_bench.run.loop.build import Components


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
