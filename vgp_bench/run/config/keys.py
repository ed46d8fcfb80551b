"""Which config keys change what a run computes: the resume policy and the report's rows, both
derived from the declarations of config/schema.py (the keys older run folders lack: compat)."""

from __future__ import annotations

from vgp_bench.compat import (  # noqa: F401 (the history tables' former home)
    ANY,
    EQUIVALENT_VALUES,
    NEWER_KEYS,
    is_equivalent_value,
    is_older_default,
    with_older_defaults,
)
from vgp_bench.run.config.schema import GROUP_EFFECTS, TRAIN_KEYS, Effect

# Each declared key's effect, and the effect of a group's keys that no declaration names
DECLARED_EFFECTS: dict[str, Effect] = {key.name: key.effect for key in TRAIN_KEYS} | GROUP_EFFECTS


def effect_of(key: str) -> Effect:
    """What a different value of `key` (dotted) does: the effect of its declaration, or of the
    nearest declared node or group above it (schema); TRAINING when none is declared."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        effect = DECLARED_EFFECTS.get(".".join(parts[:end]))
        if effect is not None:
            return effect
    return Effect.TRAINING


def is_resumable_key(key: str) -> bool:
    """Whether a resumed run may change `key`: no value of it alters the training trajectory."""
    return effect_of(key).resumable


def separates_rows(key: str) -> bool:
    """Whether the report keeps runs whose configs differ in `key` in separate rows."""
    return effect_of(key).separates_rows


# The keys a resumed run may change, each with its children; any other difference refuses the
# resume. A group listed resumable as a whole stands for its keys (`eval`: every evaluation
# setting, also those of older configs).
RESUMABLE_KEYS = tuple(
    name
    for name, effect in DECLARED_EFFECTS.items()
    if effect.resumable and not is_resumable_key(name.rpartition(".")[0])
)
