"""Every fixed config key declared once: its type, its check, and what a change of it does.

The settings checks (`settings.py`), the keys a resume may change and the report's rows
(`config/keys.py`) are derived from these declarations; tests/test_config_schema.py holds them
to the YAML in configs/. The other options of a `_target_` (a model's, an inference head's, a
dataset loader's or an optimizer's arguments) are checked by what they build and typed by their
YAML (`settings.check_declared_types`). Imports neither torch nor Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgp_bench.run.config.declarations import (
    Effect,
    Eval,
    Fit,
    TopLevel,
    Trainer,
    declared_fields,
)
from vgp_bench.run.config.rules import (
    Rule,
    boolean,
    integer,
    one_of,
    target_node,
    text,
)


@dataclass(frozen=True)
class Key:
    """One config key: its dotted name, the type of its values, its rule and its effect."""

    name: str
    kind: type  # bool, int, float, str, list, or dict for a node; null is the rule's to accept
    rule: Rule
    effect: Effect = Effect.TRAINING


def keys_of(schema: type, prefix: str = "") -> tuple[Key, ...]:
    """The Keys the dataclass `schema` declares (declarations.py), in field order."""
    return tuple(Key(*declared) for declared in declared_fields(schema, prefix))


TRAINING, RESULT, OPERATIONAL, REPLICATE = (
    Effect.TRAINING,
    Effect.RESULT,
    Effect.OPERATIONAL,
    Effect.REPLICATE,
)

# vgp-train's top-level keys, trainer's and eval's: declared by declarations.py's dataclasses
TOP_LEVEL_KEYS = keys_of(TopLevel)
TRAINER_KEYS = keys_of(Trainer, "trainer.")
EVAL_KEYS = keys_of(Eval, "eval.")

# The data protocol (docs/design.md, section 6), each in the dataset files that have it; the
# other dataset keys (shapes, sizes, Sketch's resolution) are their loader's arguments.
DATASET_KEYS = (
    Key("dataset.binarization", str, one_of("fixed", "dynamic")),  # data.base.Binarization
    Key("dataset.merge_valid", bool, boolean),
    Key("dataset.holdout", int, integer(1, optional=True)),
    Key("dataset.subset", int, integer(1, optional=True)),
    Key("dataset.eval_binarization_seed", int, integer()),
    Key("dataset.seed", int, integer()),
    Key("dataset.path", str, text(optional=True)),
)

# What the runner reads of optim: its name (metrics.json) and the two nodes it builds
OPTIM_KEYS = (
    Key("optim.name", str, text()),
    Key("optim.optimizer", dict, target_node),
    Key("optim.schedule", dict, target_node),
)

# configs/logger/: where the run's scalars also go, never what it computes (each sink's keys are
# present only when it is chosen)
LOGGER_KEYS = (
    Key("logger.tensorboard.flush_secs", int, integer(1), OPERATIONAL),
    Key("logger.csv.file", str, text(), OPERATIONAL),
    Key("logger.mlflow.tracking_uri", str, text(optional=True), OPERATIONAL),
    Key("logger.mlflow.experiment_name", str, text(), OPERATIONAL),
    Key("logger.mlflow.run_name", str, text(optional=True), OPERATIONAL),
    Key("logger.mlflow.request_timeout", int, integer(1), OPERATIONAL),
    Key("logger.mlflow.request_retries", int, integer(0), OPERATIONAL),
)

# vgp-train's config, in the order the checks go through it
TRAIN_KEYS = (
    *TOP_LEVEL_KEYS,
    *TRAINER_KEYS,
    *EVAL_KEYS,
    *DATASET_KEYS,
    *OPTIM_KEYS,
    *LOGGER_KEYS,
)

# The effect of a key under these groups that no declaration names (one of older configs)
GROUP_EFFECTS = {"eval": OPERATIONAL, "logger": OPERATIONAL}

# vgp-fit's config (configs/fit.yaml; no resume, no report): declared by declarations.Fit;
# `head` holds each family's options and `target` the density's, both checked by what they build
FIT_KEYS = keys_of(Fit)
