"""Checks of numeric and boolean settings, made before anything starts: one line per bad key."""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from vgp_bench.errors import ConfigError
from vgp_bench.locations import CONFIG_DIR

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


def threads_rule(value: Any) -> str | None:
    from vgp_bench.run.runtime import thread_count

    try:
        thread_count(value)
    except ConfigError:
        return "must be an integer >= 1 or null (torch's default; env VGP_THREADS)"
    return None


TRAINER_RULES: dict[str, Rule] = {
    "seed": integer(),
    "threads": threads_rule,
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
    "eval.aux_gap_examples": integer(0),
    "eval.aux_gap_samples": integer(1),
    "eval.aux_gap_draws": integer(1),
    "eval.aux_gap_budget": one_of("auto", "full"),
}

FIT_RULES: dict[str, Rule] = {
    "seed": integer(),
    "threads": threads_rule,
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


# vgp-train's config groups (configs/<group>/*.yaml) and its top-level keys (configs/config.yaml)
GROUPS = ("dataset", "model", "inference", "optim", "trainer", "eval")
TOP_LEVEL_KEYS = ("seed", "device", "data_dir", "experiment_name", "threads")
TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", list: "a list"}


def leaves(node: Any, prefix: str) -> dict[str, Any]:
    """A nested dict's leaves as dotted keys (lists and scalars are leaves)."""
    if isinstance(node, dict) and node:
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(leaves(value, f"{prefix}.{key}"))
        return flat
    return {prefix: node}


def value_kind(value: Any) -> type | None:
    """bool, int, float, str or list: the kind of a config value (None for null or a dict)."""
    for kind in (bool, int, float, str, list):
        if isinstance(value, kind):
            return kind
    return None


@functools.cache
def declared_kinds() -> dict[str, frozenset[type]]:
    """Each group key's kinds of value over all of the group's config files (nulls left out):
    the types the configs declare."""
    kinds: dict[str, set[type]] = {}
    for group in GROUPS:
        for path in sorted((Path(CONFIG_DIR) / group).glob("*.yaml")):
            node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            for key, value in leaves(node, group).items():
                kind = value_kind(value)
                kinds.setdefault(key, set())
                if kind is not None and not str(value).startswith("${"):
                    kinds[key].add(kind)
    return {key: frozenset(found) for key, found in kinds.items()}


def kind_problem(value: Any, kinds: frozenset[type]) -> str | None:
    """What is wrong with `value` for a key whose configs declare `kinds`, or None."""
    if not kinds or value is None:
        return None
    if kinds <= {int, float}:
        whole = int in kinds and float not in kinds
        ok = value_kind(value) in ((int,) if whole else (int, float))
        ok = ok or (whole and _integer(value) is not None)
        return None if ok else f"must be {TYPE_WORDS[int if whole else float]}"
    if kinds == {bool} and not isinstance(value, bool):
        return "must be true or false"
    if kinds == {list} and not isinstance(value, list | tuple):
        return "must be a list"
    return None


def check_declared_types(cfg: DictConfig) -> None:
    """Raise a one-line ConfigError naming the first group key whose value is not of the
    type its config files declare (`inference.variational_data_size=abc`)."""
    kinds = declared_kinds()
    for group in GROUPS:
        node = cfg.get(group)
        if node is None:
            continue
        for key, value in leaves(OmegaConf.to_container(node, resolve=True), group).items():
            problem = kind_problem(value, kinds.get(key, frozenset()))
            if problem:
                raise ConfigError(f"{key} {problem}, got {value!r}")


def override_key(override: str) -> tuple[str, bool]:
    """The key of a command-line override and whether it adds (`+key=`, `++key=`)."""
    adds = override.startswith("+")
    return override.lstrip("+~").split("=", 1)[0].strip(), adds


def is_target_argument(cfg: DictConfig | None, key: str) -> bool:
    """Whether `key` names an argument of the class or function its node builds (`_target_`):
    `+optim.optimizer.weight_decay=0.01` passes one more argument, it is no typo."""
    parent, _, name = key.rpartition(".")
    target = OmegaConf.select(cfg, f"{parent}._target_") if cfg is not None and parent else None
    if not isinstance(target, str):
        return False
    import inspect

    from hydra.utils import get_object

    try:
        parameters = inspect.signature(get_object(target)).parameters
    except (ImportError, AttributeError, ValueError, TypeError):
        return False
    return name in parameters


def check_added_keys(overrides: Sequence[str], cfg: DictConfig | None = None) -> None:
    """Refuse `+key=value` for a key no config defines (a typo Hydra would accept), unless it
    is an argument of the `_target_` its node builds (see `is_target_argument`)."""
    known = set(declared_kinds()) | set(TOP_LEVEL_KEYS)
    for override in overrides:
        key, adds = override_key(override)
        if not adds or key in GROUPS or key == "experiment" or key.startswith("hydra"):
            continue
        if is_target_argument(cfg, key):
            continue
        if key not in known and not any(name.startswith(key + ".") for name in known):
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"+{key}: no such setting{hint}; the runner takes only the keys its configs "
                "define (vgp-train --cfg job lists them)"
            )


def check_train_settings(cfg: DictConfig) -> None:
    """Every trainer and evaluation setting of a vgp-train config, and the types of the
    others."""
    check_settings(cfg, TRAINER_RULES)
    check_settings(cfg, EVAL_RULES)
    check_declared_types(cfg)


def check_eval_settings(cfg: DictConfig) -> None:
    check_settings(cfg, {"threads": threads_rule, **EVAL_RULES})


def check_fit_settings(cfg: DictConfig) -> None:
    check_settings(cfg, FIT_RULES)
