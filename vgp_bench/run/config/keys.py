"""Which config keys change what a run computes: the resume policy and the report's rows, both
derived from the declarations of config/schema.py, and the keys older run folders lack."""

from __future__ import annotations

import json
from typing import Any

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

# Keys added to the configs after runs already existed: a run whose saved config lacks one
# resumes when the key holds the value that computes what the older code computed (ANY: the
# key changes nothing unless another, older key turns it on).
ANY = object()
NEWER_KEYS: dict[str, Any] = {
    "trainer.objective": "elbo",
    "inference.prior_mean": "zero",
    "inference.paper_auxiliary": "factorized",
    "inference.warp": "gp",
    "inference.aux_correction": "learned",
    "inference.noise_ratio": ANY,  # read only by mean_field_scale=tied, newer itself
    "inference.init_noise_scale": ANY,  # read only by prior_mean=identity
    "trainer.init_model": None,
    "trainer.train_model": True,
    "trainer.shuffle": True,
    "trainer.early_stopping.patience": None,
    "trainer.early_stopping.min_delta": ANY,  # read only with a patience, newer itself
    "eval.checkpoint": ANY,  # resumable: an older run's resume may set it
    "eval.aux_gap_budget": ANY,  # resumable, like every eval key
    "threads": ANY,  # how many CPU threads: never what a run computes
    "dataset.holdout": None,
    "model.scale_link": "softplus",
    "model.init": "default",
    "model.output_bias": "zero",
    "inference.scale_link": "softplus",
    "inference.init": "default",
}


# Values renamed after runs already existed, each computing what the older value computed, bit
# for bit (tests/test_rmsprop.py): a run saved with the older value resumes under the newer
# one, and the report counts both in one row.
EQUIVALENT_VALUES: dict[str, dict[Any, Any]] = {
    "optim.optimizer._target_": {"torch.optim.RMSprop": "vgp_bench.optimizers.RMSprop"},
}


def is_equivalent_value(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`'s saved value is an older name of its new value (EQUIVALENT_VALUES)."""
    renamed = EQUIVALENT_VALUES.get(key)
    if renamed is None or key not in old or key not in new:
        return False
    older = old[key]
    return isinstance(older, str) and renamed.get(older) == new[key]


def is_older_default(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `key`, absent from a run's saved config, holds the value of the older code."""
    if key in old or key not in NEWER_KEYS:
        return False
    compatible = NEWER_KEYS[key]
    return compatible is ANY or new.get(key) == compatible


def with_older_defaults(config: dict[str, str]) -> dict[str, str]:
    """A flattened config (values as JSON text) with each absent newer key at its older value
    and each renamed value under its newer name, so runs started before a key existed or a
    value was renamed compare equal to runs that set it to that value."""
    filled = dict(config)
    for key, older in NEWER_KEYS.items():
        if key not in filled and older is not ANY:
            filled[key] = json.dumps(older, sort_keys=True)
    for key, renamed in EQUIVALENT_VALUES.items():
        for older_name, newer_name in renamed.items():
            if filled.get(key) == json.dumps(older_name, sort_keys=True):
                filled[key] = json.dumps(newer_name, sort_keys=True)
    return filled
