"""Checks of numeric and boolean settings, made before anything starts: one line per bad key."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from vgp_bench.runtime import ConfigError

# A rule takes the value and returns what is wrong with it, or None.
Rule = Callable[[Any], str | None]


def _integer(value: Any) -> int | None:
    """`value` as an int when it is a whole number (1000 or 1e3), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def integer(minimum: int | None = None, optional: bool = False) -> Rule:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        number = _integer(value)
        wanted = "an integer" if minimum is None else f"an integer >= {minimum}"
        wanted += " or null" if optional else ""
        if number is None or (minimum is not None and number < minimum):
            return f"must be {wanted}"
        return None

    return rule


def number(positive: bool = False, optional: bool = False) -> Rule:
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and (value > 0 or not positive)
        if not ok:
            wanted = "a positive number" if positive else "a finite number"
            return f"must be {wanted}" + (" or null" if optional else "")
        return None

    return rule


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def one_of(*choices: str) -> Rule:
    def rule(value: Any) -> str | None:
        return None if value in choices else f"must be {' or '.join(choices)}"

    return rule


def integer_list(minimum: int) -> Rule:
    def rule(value: Any) -> str | None:
        items = list(value) if isinstance(value, list | tuple) else None
        if items is None or any(
            _integer(item) is None or _integer(item) < minimum for item in items
        ):
            return f"must be a list of integers >= {minimum}"
        return None

    return rule


def non_empty_list(value: Any) -> str | None:
    return None if isinstance(value, list | tuple) and value else "must be a non-empty list"


TRAINER_RULES: dict[str, Rule] = {
    "seed": integer(),
    "trainer.epochs": integer(1),
    "trainer.max_steps": integer(1, optional=True),
    "trainer.batch_size": integer(1),
    "trainer.n_samples": integer(1),
    "trainer.drop_last": boolean,
    "trainer.shuffle": boolean,
    "trainer.early_stopping.patience": integer(1, optional=True),
    "trainer.early_stopping.min_delta": number(),
    "trainer.log_every": integer(1),
    "trainer.checkpoint_every": integer(1),
    "trainer.valid_samples": integer(0),
    "trainer.valid_subset": integer(1, optional=True),
    "trainer.eval_at_epochs": integer_list(1),
    "trainer.image_every": integer(0),
    "trainer.grad_clip": number(positive=True, optional=True),
    "trainer.check_gradients": boolean,
    "trainer.max_nonfinite": integer(1),
    "trainer.progress": boolean,
    "trainer.resume": boolean,
    "trainer.move_aside": boolean,
    "trainer.micro_batches": integer(1),
    "trainer.compile": boolean,
    "trainer.precision": one_of("fp32", "bf16"),
    "trainer.find_unused_parameters": boolean,
}

EVAL_RULES: dict[str, Rule] = {
    "eval.is_samples": integer(1),
    "eval.epoch_is_samples": integer(1),
    "eval.chunk_size": integer(1),
    "eval.batch_size": integer(1),
    "eval.subset": integer(1, optional=True),
    "eval.save_per_example": boolean,
    "eval.at_end": boolean,
    "eval.checkpoint": one_of("auto", "final", "best"),
    "eval.seed": integer(),
}

FIT_RULES: dict[str, Rule] = {
    "seed": integer(),
    "steps": integer(1),
    "learning_rate": number(positive=True),
    "final_learning_rate": number(positive=True),
    "identity_start": number(optional=True),
    "families": non_empty_list,
    "samples.per_step": integer(1),
    "samples.bound": integer(1),
    "samples.importance": integer(1),
    "samples.plot": integer(1),
}


def check_settings(cfg: DictConfig, rules: dict[str, Rule], only: Iterable[str] = ()) -> None:
    """Raise a one-line ConfigError naming the first key whose value breaks its rule.

    Keys absent from `cfg` are skipped (a config without that group); `only` restricts the
    check to keys under these prefixes.
    """
    prefixes = tuple(only)
    for key, rule in rules.items():
        if prefixes and not key.startswith(prefixes):
            continue
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
        except MissingMandatoryValue:
            raise ConfigError(f"{key} is required: pass {key}=...") from None
        if value is _ABSENT:
            continue
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        problem = rule(value)
        if problem:
            raise ConfigError(f"{key} {problem}, got {value!r}")


_ABSENT = object()


def check_train_settings(cfg: DictConfig) -> None:
    """Every trainer and evaluation setting of a vgp-train config."""
    check_settings(cfg, TRAINER_RULES)
    check_settings(cfg, EVAL_RULES)


def check_eval_settings(cfg: DictConfig) -> None:
    check_settings(cfg, EVAL_RULES)


def check_fit_settings(cfg: DictConfig) -> None:
    check_settings(cfg, FIT_RULES)
