"""torch.compile as the trainer uses it: the mode for the device, and eager mode as a fallback."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from vgp_bench.errors import ConfigError

COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune")


def compile_mode(requested: str, device: torch.device) -> str | None:
    """torch.compile's mode for `trainer.compile_mode` (None: torch's default mode).

    `auto` captures the step in CUDA graphs (reduce-overhead) on CUDA, where a batch-100 step
    is launch-bound, and keeps the default mode elsewhere (CUDA graphs need a GPU).
    """
    if requested not in COMPILE_MODES:
        raise ConfigError(
            f"trainer.compile_mode must be one of {list(COMPILE_MODES)}, got {requested!r}"
        )
    if requested == "auto":
        return "reduce-overhead" if device.type == "cuda" else None
    return None if requested == "default" else requested


def compile_with_fallback(module: nn.Module, mode: str | None = None) -> Callable[..., Any]:
    """torch.compile `module` (in `mode`); if compiling or its first call fails, warn and run
    eagerly."""
    try:
        compiled = torch.compile(module) if mode is None else torch.compile(module, mode=mode)
    except Exception as error:  # backend missing on this platform
        warnings.warn(
            f"trainer.compile: torch.compile unavailable ({error}); running eagerly", stacklevel=2
        )
        return module
    state = {"call": compiled}

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return state["call"](*args, **kwargs)
        except Exception as error:
            if state["call"] is module:
                raise
            warnings.warn(
                f"trainer.compile: compiled call failed ({type(error).__name__}: "
                f"{error}); falling back to eager mode",
                stacklevel=2,
            )
            state["call"] = module
            return module(*args, **kwargs)

    return call
