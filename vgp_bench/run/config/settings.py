"""Checks of a config's settings, made before anything starts: one line per bad key.

What each key accepts is declared once, in `config/schema.py`; the keys no declaration names
are held to the types their config files declare."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from vgp_bench.errors import ConfigError
from vgp_bench.locations import CONFIG_DIR
from vgp_bench.run.config.option_schema import OPTION_KEYS
from vgp_bench.run.config.rules import whole_number
from vgp_bench.run.config.schema import EVAL_KEYS, FIT_KEYS, TRAIN_KEYS, Key
from vgp_bench.run.loggers.build import check_logger_choice


def check_settings(cfg: DictConfig, keys: Iterable[Key]) -> None:
    """Raise a one-line ConfigError naming the first of `keys` whose value breaks its rule.

    Keys absent from `cfg` are skipped (a config without that group, a dataset without that
    option).
    """
    for key in keys:
        try:
            value = OmegaConf.select(cfg, key.name, default=_ABSENT, throw_on_missing=True)
        except MissingMandatoryValue:
            raise ConfigError(f"{key.name} is required: pass {key.name}=...") from None
        if value is _ABSENT:
            continue
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value)
        problem = key.rule(value)
        if problem:
            raise ConfigError(f"{key.name} {problem}, got {value!r}")


_ABSENT = object()


# vgp-train's config groups (configs/<group>/*.yaml)
GROUPS = ("dataset", "model", "inference", "optim", "trainer", "eval")
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
        ok = ok or (whole and whole_number(value) is not None)
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


def check_added_keys(
    overrides: Sequence[str],
    cfg: DictConfig | None = None,
    known: Iterable[str] | None = None,
    command: str = "vgp-train",
) -> None:
    """Refuse `+key=value` for a key no config of `command` defines (a typo Hydra would
    accept), unless it is an argument of the `_target_` its node builds (see
    `is_target_argument`). `known`: the command's keys (vgp-train's by default)."""
    if known is None:
        known = set(declared_kinds()) | {key.name for key in TRAIN_KEYS}
    known = set(known)
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
                f"+{key}: no such setting{hint}; {command} takes only the keys its configs "
                f"define ({command} --cfg job lists them)"
            )


def check_train_settings(cfg: DictConfig) -> None:
    """Every declared key of a vgp-train config (schema.TRAIN_KEYS), the types of the
    others, then the rules of the options of what it builds (option_schema.OPTION_KEYS)."""
    check_settings(cfg, TRAIN_KEYS)
    check_declared_types(cfg)
    check_settings(cfg, OPTION_KEYS)
    check_logger_choice(cfg.get("logger"))


# Why trainer.compile=true is refused on CPU (scripts/bench.py measures it again: `make bench`'s
# compile_on_cpu): every draw with an explicit torch.Generator (the noise of each site, the
# dynamic binarization) breaks dynamo's graph, 4 breaks a dlgm1 step, and the pieces between
# them are too small for inductor's CPU kernels to pay for the breaks.
COMPILE_ON_CPU = (
    "trainer.compile=true is refused on CPU: compiled steps measured slower than eager here "
    "(dlgm1 + vae 0.88x; every draw with a seeded generator breaks the graph); train eagerly "
    "(trainer.compile=false) or compile on a GPU (device=cuda)"
)


def check_compile_device(cfg: DictConfig) -> None:
    """Refuse `trainer.compile=true` where the step would run on the CPU (COMPILE_ON_CPU);
    vgp-train asks this, the Trainer does not (`make bench` measures compiled CPU steps)."""
    if cfg.trainer.get("compile") is not True:
        return
    device = str(cfg.get("device", "auto"))
    if device == "auto":
        import torch  # only here: the other checks run before torch is loaded

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        raise ConfigError(COMPILE_ON_CPU)


def check_eval_settings(cfg: DictConfig) -> None:
    """vgp-eval's settings: `threads` and the `eval` group."""
    check_settings(cfg, [key for key in TRAIN_KEYS if key.name in EVAL_COMMAND_KEYS])


EVAL_COMMAND_KEYS = frozenset({"threads", *(key.name for key in EVAL_KEYS)})


def eval_command_keys() -> frozenset[str]:
    """Every key vgp-eval takes: configs/evaluate.yaml's own and its `eval` group's."""
    own = OmegaConf.load(Path(CONFIG_DIR) / "evaluate.yaml")
    names = {str(key) for key in own if key not in ("defaults", "hydra")}
    return frozenset(names | {key.name for key in EVAL_KEYS})


def check_fit_settings(cfg: DictConfig) -> None:
    """Every declared key of a vgp-fit config (schema.FIT_KEYS)."""
    check_settings(cfg, FIT_KEYS)
