"""The checked config's declared nodes as their dataclasses (declarations.py): code reads typed
attributes, not casts of untyped values. Imports neither torch nor Hydra."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig

from vgp_bench.run.config.declarations import Eval, TopLevel, Trainer, value_kind

Declared = TypeVar("Declared")


def typed(schema: type[Declared], node: DictConfig | Mapping[str, Any]) -> Declared:
    """The dataclass `schema` built from a checked config node: each declared key's value
    converted by its declared `read` or else to its declared type (null stays null), an absent
    key at its default, keys the dataclass does not declare left out."""
    hints = typing.get_type_hints(schema)
    found: dict[str, Any] = {}
    for item in dataclasses.fields(schema):  # type: ignore[arg-type]
        if item.name not in node or (
            "rule" not in item.metadata and not dataclasses.is_dataclass(hints[item.name])
        ):  # absent, or a node of options without a rule (Fit.target, Fit.head)
            continue
        hint, value = hints[item.name], node[item.name]  # only the declared keys are resolved
        if dataclasses.is_dataclass(hint):
            found[item.name] = typed(hint, value or {})  # type: ignore[arg-type]
        elif item.metadata.get("read"):
            found[item.name] = item.metadata["read"](value)
        else:
            found[item.name] = None if value is None else converted(hint, value)
    return schema(**found)


def converted(hint: Any, value: Any) -> Any:
    """`value` as the declared type `hint` (a list's items as its item type)."""
    kind = value_kind(hint)
    if kind is list:
        (item_kind,) = typing.get_args(hint)
        return [item_kind(item) for item in value]
    return kind(value)


def top_level(cfg: DictConfig) -> TopLevel:
    """vgp-train's top-level keys, typed."""
    return typed(TopLevel, cfg)


def trainer_settings(cfg: DictConfig) -> Trainer:
    """The `trainer` node, typed."""
    return typed(Trainer, cfg.trainer)


def eval_settings(cfg: DictConfig) -> Eval:
    """The `eval` node, typed."""
    return typed(Eval, cfg.eval)
