"""The key declarations (vgp_bench/run/config/schema.py) against the YAML in configs/: every
fixed key declared once and checked, every declaration a key of the configs, the types alike, a
bad value refused in one line, and the resume policy and the report's rows as they were."""

from __future__ import annotations

import functools
import importlib.util
from collections import Counter
from typing import Any, get_args

import pytest
from omegaconf import DictConfig, OmegaConf

from tests.helpers import CONFIG_DIR, compose_config
from vgp_bench.errors import ConfigError
from vgp_bench.run.config.keys import (
    NEWER_KEYS,
    RESUMABLE_KEYS,
    is_resumable_key,
    separates_rows,
)
from vgp_bench.run.config.schema import FIT_KEYS, TRAIN_KEYS, Key
from vgp_bench.run.config.settings import GROUPS, check_fit_settings, check_train_settings, leaves

OPTION_GROUPS = ("dataset", "model", "inference", "optim", "logger")


@functools.cache
def train_configs() -> dict[str, DictConfig]:
    """vgp-train's composed config: the default, with each group option, with each experiment."""
    cases = {"default": []}
    for group in OPTION_GROUPS:
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            cases[f"{group}={path.stem}"] = [f"{group}={path.stem}"]
    for path in sorted((CONFIG_DIR / "experiment").glob("*.yaml")):
        cases[f"experiment={path.stem}"] = [f"experiment={path.stem}"]
    return {name: compose_config(overrides) for name, overrides in cases.items()}


@functools.cache
def fit_configs() -> dict[str, DictConfig]:
    """vgp-fit's composed config with each target."""
    targets = sorted(path.stem for path in (CONFIG_DIR / "target").glob("*.yaml"))
    return {name: compose_config([f"target={name}"], config_name="fit") for name in targets}


def config_leaves(cfg: DictConfig) -> dict[str, Any]:
    """A config's leaves as dotted keys, interpolations unresolved (`${...}` text)."""
    node = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(node, dict)
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(leaves(value, str(key)))
    return flat


def all_leaves(configs: dict[str, DictConfig]) -> set[str]:
    return {key for cfg in configs.values() for key in config_leaves(cfg)}


def is_fixed_key(key: str) -> bool:
    """A key of vgp-train's trainer, eval or top level (not a group option's)."""
    top = key.split(".")[0]
    return top in ("trainer", "eval") or top not in GROUPS


def test_every_trainer_eval_and_top_level_key_has_one_declaration() -> None:
    counts = Counter(key.name for key in TRAIN_KEYS)
    assert [name for name, count in counts.items() if count > 1] == []
    fixed = {key for key in all_leaves(train_configs()) if is_fixed_key(key)}
    assert sorted(fixed - set(counts)) == []
    assert all(callable(key.rule) for key in TRAIN_KEYS)


def test_every_vgp_fit_key_but_the_families_and_target_options_has_one_declaration() -> None:
    counts = Counter(key.name for key in FIT_KEYS)
    assert [name for name, count in counts.items() if count > 1] == []
    fixed = {
        key for key in all_leaves(fit_configs()) if key.split(".")[0] not in ("head", "target")
    }
    assert fixed == set(counts)


def declared_value(configs: dict[str, DictConfig], name: str) -> tuple[str, DictConfig]:
    """The first composed config that holds the key `name`, and its name."""
    for case, cfg in configs.items():
        if OmegaConf.select(cfg, name, default=KeyError) is not KeyError:
            return case, cfg
    raise AssertionError(f"{name} is declared but no config holds it")


@pytest.mark.parametrize("key", TRAIN_KEYS, ids=lambda key: key.name)
def test_every_declaration_is_a_key_of_the_configs(key: Key) -> None:
    declared_value(train_configs(), key.name)


def kind_of_yaml_value(value: Any, kind: type) -> bool:
    """Whether a config value (not null, not an interpolation) is of the declared kind."""
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def raw_value(node: Any, name: str) -> Any:
    """The value at the dotted `name` of a nested dict, as written (None when absent)."""
    for part in name.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def test_the_declared_types_are_those_of_the_yaml() -> None:
    wrong = []
    for case, cfg in train_configs().items():
        container = OmegaConf.to_container(cfg, resolve=False)
        for key in TRAIN_KEYS:
            value = raw_value(container, key.name)
            if value is None or (isinstance(value, str) and value.startswith("${")):
                continue
            if not kind_of_yaml_value(value, key.kind):
                wrong.append(f"{case}: {key.name}={value!r} is not {key.kind.__name__}")
    assert wrong == []


def test_every_composed_config_passes_its_checks() -> None:
    """Every config passes; logger=mlflow only where MLflow is installed (the optional extra),
    and otherwise is refused in one line naming the extra."""
    mlflow_installed = importlib.util.find_spec("mlflow") is not None
    for name, cfg in train_configs().items():
        if name == "logger=mlflow" and not mlflow_installed:
            with pytest.raises(ConfigError, match=r"pip install -e '\.\[mlflow\]'"):
                check_train_settings(cfg)
            continue
        check_train_settings(cfg)
    for cfg in fit_configs().values():
        check_fit_settings(cfg)


# A value of the wrong kind for each declared kind
BAD_VALUES: dict[type, Any] = {
    bool: "maybe",
    int: "abc",
    float: "abc",
    str: [1, 2],
    list: "abc",
    dict: "abc",
}


def refusal(check: Any, cfg: DictConfig, key: Key) -> str:
    """The message `check` raises for `cfg` with a bad value of `key`'s kind."""
    bad = BAD_VALUES[key.kind]
    # a plain copy: the composed config's typed nodes refuse a bad value themselves (Hydra's
    # schemas); the checks hold command-line values and old run folders' configs
    changed = OmegaConf.create(OmegaConf.to_container(cfg))
    OmegaConf.update(changed, key.name, bad, merge=False)
    with pytest.raises(ConfigError) as error:
        check(changed)
    expected = f"{key.name} {key.rule(bad)}, got {bad!r}"
    assert str(error.value) == expected and "\n" not in expected
    return expected


@pytest.mark.parametrize("key", TRAIN_KEYS, ids=lambda key: key.name)
def test_a_bad_value_of_each_key_is_one_line_naming_the_key_and_what_it_takes(key: Key) -> None:
    _, cfg = declared_value(train_configs(), key.name)
    assert refusal(check_train_settings, cfg, key).startswith(f"{key.name} must be ")


@pytest.mark.parametrize("key", FIT_KEYS, ids=lambda key: key.name)
def test_a_bad_vgp_fit_value_is_one_line_naming_the_key(key: Key) -> None:
    _, cfg = declared_value(fit_configs(), key.name)
    assert refusal(check_fit_settings, cfg, key).startswith(f"{key.name} must be ")


def accepted_names(name: str) -> set[str]:
    """The names a declared choice accepts, as its rule's message lists them."""
    (key,) = [key for key in TRAIN_KEYS if key.name == name]
    message = key.rule("?")
    assert message is not None
    return set(message.removeprefix("must be ").removesuffix(" or null").split(" or "))


def test_the_declared_choices_are_those_the_code_takes() -> None:
    import torch.distributed

    from vgp_bench.data.base import Binarization
    from vgp_bench.estimators import TRAINING_BOUNDS
    from vgp_bench.run.loop.compilation import COMPILE_MODES

    assert accepted_names("trainer.objective") == set(TRAINING_BOUNDS)
    assert accepted_names("trainer.compile_mode") == set(COMPILE_MODES)
    assert accepted_names("dataset.binarization") == set(get_args(Binarization))
    assert accepted_names("trainer.ddp_backend") <= set(torch.distributed.Backend.backend_list)


# keys.RESUMABLE_KEYS as written by hand before the declarations (git 395255d)
RESUMABLE_BEFORE = {
    "device",
    "threads",
    "data_dir",
    "experiment_name",
    "eval",
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.log_every",
    "trainer.checkpoint_every",
    "trainer.valid_samples",
    "trainer.valid_subset",
    "trainer.eval_at_epochs",
    "trainer.image_every",
    "trainer.max_nonfinite",
    "trainer.progress",
    "trainer.resume",
    "trainer.move_aside",
    "trainer.compile",
    "trainer.ddp_backend",
    "trainer.find_unused_parameters",
    "trainer.diagnostics_examples",
    "trainer.compile_mode",
    "trainer.gpu_memory_fraction",
    "trainer.early_stopping.patience",
    "logger",  # added with the group (issue 59): where the scalars go, never what a run computes
}
# ... and the report's rows: RESULT_KEYS of config/keys.py and IGNORED_CONFIG_KEYS of report/rows
RESULT_BEFORE = {
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.valid_samples",
    "trainer.valid_subset",
    "trainer.early_stopping.patience",
    "eval.checkpoint",
}
IGNORED_BEFORE = {"seed", "device", "data_dir"}
# keys of older configs that no declaration names
OLDER_KEYS = {"eval.an_older_setting", "trainer.an_older_setting", "eval"}


def resumable_before(key: str) -> bool:
    return any(key == allowed or key.startswith(allowed + ".") for allowed in RESUMABLE_BEFORE)


def test_a_resume_may_change_the_keys_it_could_before() -> None:
    assert set(RESUMABLE_KEYS) == RESUMABLE_BEFORE
    keys = all_leaves(train_configs()) | OLDER_KEYS
    assert sorted(key for key in keys if is_resumable_key(key) != resumable_before(key)) == []


def test_the_report_keeps_apart_the_runs_it_kept_apart_before() -> None:
    def before(key: str) -> bool:
        operational = resumable_before(key) and key not in RESULT_BEFORE
        return key not in IGNORED_BEFORE and not operational

    keys = all_leaves(train_configs()) | OLDER_KEYS
    assert sorted(key for key in keys if separates_rows(key) != before(key)) == []


def test_every_newer_key_is_a_key_of_the_configs() -> None:
    assert sorted(set(NEWER_KEYS) - all_leaves(train_configs())) == []
