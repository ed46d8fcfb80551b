"""vgp-train's top-level, `trainer` and `eval` keys as dataclasses: each field's type and default,
with its rule and effect beside it (field metadata); schema.py's Key lists derive from them.

Imports neither torch nor Hydra. The defaults equal those of configs/ (tests/test_config_schema.py
holds them equal until the YAML stops repeating them).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from vgp_bench.run.config.rules import (
    Rule,
    boolean,
    device_name,
    integer,
    integer_list,
    number,
    one_of,
    text,
    threads_rule,
    threads_value,
)


class Effect(Enum):
    """What a run whose config differs in a key is, to a resume and to the report."""

    TRAINING = "training"  # another training: a resume refuses it; the report's rows keep it apart
    RESULT = "result"  # the same training, other reported numbers: resumable; rows keep it apart
    OPERATIONAL = "operational"  # neither (device, logging, cadence, the evaluation's settings,
    # whose S and test size the report reads from the result): resumable; one row
    REPLICATE = "replicate"  # another draw of one configuration (the seed): a resume refuses it;
    # the report pools the runs into one row

    @property
    def resumable(self) -> bool:
        """Whether a resumed run may change a key with this effect."""
        return self in (Effect.RESULT, Effect.OPERATIONAL)

    @property
    def separates_rows(self) -> bool:
        """Whether the report keeps runs that differ in such a key in separate rows."""
        return self in (Effect.TRAINING, Effect.RESULT)


TRAINING, RESULT, OPERATIONAL, REPLICATE = (
    Effect.TRAINING,
    Effect.RESULT,
    Effect.OPERATIONAL,
    Effect.REPLICATE,
)


def setting(
    default: Any, rule: Rule, effect: Effect = TRAINING, read: Callable[[Any], Any] | None = None
) -> Any:
    """A declared key: its default, the rule its values must pass and what a change does;
    `read`: how code reads a value that passed (run/config/typed.py; else its declared type)."""
    metadata = {"rule": rule, "effect": effect, "read": read}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TopLevel:
    """vgp-train's top-level keys (configs/config.yaml)."""

    seed: int = setting(0, integer(), REPLICATE)
    device: str = setting("auto", device_name, OPERATIONAL)  # auto | cpu | cuda | cuda:N
    threads: int | None = setting(None, threads_rule, OPERATIONAL, threads_value)  # VGP_THREADS
    data_dir: str = setting("data", text(), OPERATIONAL)
    experiment_name: str | None = setting(None, text(optional=True), OPERATIONAL)


@dataclass
class EarlyStopping:
    """trainer.early_stopping: stop after `patience` epochs gaining less than `min_delta`."""

    patience: int | None = setting(None, integer(1, optional=True), RESULT)
    min_delta: float = setting(0.0, number())


@dataclass
class Trainer:
    """configs/trainer/default.yaml (the comments there say what each key does)."""

    epochs: int = setting(5, integer(1), RESULT)
    max_steps: int | None = setting(None, integer(1, optional=True), RESULT)
    batch_size: int = setting(100, integer(1))
    n_samples: int = setting(1, integer(1))
    objective: str = setting("elbo", one_of("elbo", "iwae"))  # estimators.TRAINING_BOUNDS
    drop_last: bool = setting(False, boolean)
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)
    shuffle: bool = setting(True, boolean)
    log_every: int = setting(50, integer(1), OPERATIONAL)
    checkpoint_every: int = setting(1000, integer(1), OPERATIONAL)
    valid_samples: int = setting(1, integer(0), RESULT)
    valid_subset: int | None = setting(None, integer(1, optional=True), RESULT)
    diagnostics_examples: int = setting(100, integer(0), OPERATIONAL)
    eval_at_epochs: list[int] = setting([], integer_list(1), OPERATIONAL)  # noqa: RUF009
    image_every: int = setting(1, integer(0), OPERATIONAL)
    grad_clip: float | None = setting(None, number(positive=True, optional=True))
    check_gradients: bool = setting(False, boolean)
    max_nonfinite: int = setting(10, integer(1), OPERATIONAL)
    progress: bool = setting(True, boolean, OPERATIONAL)
    resume: bool = setting(True, boolean, OPERATIONAL)
    move_aside: bool = setting(False, boolean, OPERATIONAL)
    init_model: str | None = setting(None, text(optional=True))
    train_model: bool = setting(True, boolean)
    micro_batches: int = setting(1, integer(1))
    compile: bool = setting(False, boolean, OPERATIONAL)
    compile_mode: str = setting(  # compilation.COMPILE_MODES
        "auto", one_of("auto", "default", "reduce-overhead", "max-autotune"), OPERATIONAL
    )
    precision: str = setting("fp32", one_of("fp32", "bf16"))
    find_unused_parameters: bool = setting(False, boolean, OPERATIONAL)
    gpu_memory_fraction: float | None = setting(
        None, number(positive=True, optional=True, at_most=1), OPERATIONAL
    )
    ddp_backend: str | None = setting(  # torch.distributed's backends
        None, one_of("nccl", "gloo", "mpi", "ucc", optional=True), OPERATIONAL
    )


@dataclass
class Eval:
    """configs/eval/default.yaml: every evaluation setting is resumable."""

    is_samples: int = setting(500, integer(1), OPERATIONAL)
    epoch_is_samples: int = setting(100, integer(1), OPERATIONAL)
    chunk_size: int = setting(100, integer(1), OPERATIONAL)
    batch_size: int = setting(100, integer(1), OPERATIONAL)
    split: str = setting("test", one_of("train", "valid", "test"), OPERATIONAL)
    subset: int | None = setting(2000, integer(1, optional=True), OPERATIONAL)
    save_per_example: bool = setting(False, boolean, OPERATIONAL)
    checkpoint: str = setting("auto", one_of("auto", "final", "best"), RESULT)
    at_end: bool = setting(True, boolean, OPERATIONAL)
    seed: int = setting(1234, integer(), OPERATIONAL)
    aux_gap_examples: int = setting(500, integer(0), OPERATIONAL)
    aux_gap_samples: int = setting(256, integer(1), OPERATIONAL)
    aux_gap_draws: int = setting(10, integer(1), OPERATIONAL)
    aux_gap_budget: str = setting("auto", one_of("auto", "full"), OPERATIONAL)


def value_kind(hint: Any) -> type:
    """bool, int, float, str or list: the kind of a field's values (Optional left out)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return typing.get_origin(hint) or hint


def declared_fields(schema: type, prefix: str = "") -> list[tuple[str, type, Rule, Effect]]:
    """Each declared key of the dataclass `schema` (nested ones dotted), in field order: its
    name, kind, rule and effect."""
    hints = typing.get_type_hints(schema)
    found = []
    for item in dataclasses.fields(schema):
        name = f"{prefix}{item.name}"
        if dataclasses.is_dataclass(hints[item.name]):
            found.extend(declared_fields(hints[item.name], f"{name}."))
            continue
        found.append(
            (name, value_kind(hints[item.name]), item.metadata["rule"], item.metadata["effect"])
        )
    return found
