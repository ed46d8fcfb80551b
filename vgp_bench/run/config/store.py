"""Hydra's ConfigStore holding the declared dataclasses as schemas (train_schema, trainer_schema,
eval_schema, fit_schema), so that Hydra checks each key's type as it composes. Every path
that composes reads CONFIG_DIR or compose_config from here, so importing this module (which
registers them) comes first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from vgp_bench import locations
from vgp_bench.run.config.declarations import Eval, Fit, TopLevel, Trainer


@dataclass
class Groups:
    """vgp-train's config groups as configs/config.yaml chooses them (each typed by its own
    schema where it has one: trainer_schema, eval_schema)."""

    dataset: Any = MISSING
    model: Any = MISSING
    inference: Any = MISSING
    optim: Any = MISSING
    trainer: Any = MISSING
    eval: Any = MISSING
    logger: Any = MISSING


@dataclass
class TrainSchema(TopLevel, Groups):
    """vgp-train's primary schema: the groups' fields first, then the top-level keys (a
    dataclass lists its bases' fields from the last base on), the order of the composed config."""


# The schemas as configs/ names them in its defaults lists: at the top of the config tree, not
# in a group, where they would be options of it (listed by --help, choosable on the command line)
SCHEMAS: dict[str, type] = {
    "train_schema": TrainSchema,
    "trainer_schema": Trainer,
    "eval_schema": Eval,
    "fit_schema": Fit,  # vgp-fit's primary schema
}


def register_schemas() -> None:
    """Put SCHEMAS in Hydra's ConfigStore (again: the same nodes)."""
    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(name=name, node=schema)


register_schemas()

# The Hydra configs, for hydra.main: read from here, so that the schemas are registered first
CONFIG_DIR = locations.CONFIG_DIR


def compose_config(
    overrides: list[str], config_name: str = "config", return_hydra_config: bool = False
) -> DictConfig:
    """The config a command of this repository sees for these command-line overrides."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            config_name=config_name,
            overrides=overrides,
            return_hydra_config=return_hydra_config,
        )
