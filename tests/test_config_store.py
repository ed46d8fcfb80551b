"""The declared dataclasses as Hydra's schemas (vgp_bench/run/config/store.py): the composed
config is typed by them, the YAML states none of their values, Hydra refuses a value of the
wrong type naming the key, and the command line's values are checked in one line first."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from tests.helpers import CONFIG_DIR, REPO, compose_config
from vgp_bench.run.config.command_line import TYPED_KEYS, command_line_problem
from vgp_bench.run.config.declarations import Eval, Fit, Samples, TopLevel, Trainer
from vgp_bench.run.config.keys import is_resumable_key
from vgp_bench.run.config.schema import FIT_KEYS, Key
from vgp_bench.run.config.store import TrainSchema
from vgp_bench.run.config.typed import typed
from vgp_bench.run.folder.resume_policy import resume_changes

TRAIN_TYPED = list(TYPED_KEYS["vgp-train"].values())


def test_the_composed_configs_are_typed_by_the_declarations() -> None:
    cfg = compose_config([])
    assert OmegaConf.get_type(cfg) is TrainSchema
    assert OmegaConf.get_type(cfg.trainer) is Trainer and OmegaConf.get_type(cfg.eval) is Eval
    evaluate = compose_config(["checkpoint=x"], config_name="evaluate")
    assert OmegaConf.get_type(evaluate.eval) is Eval
    fit = compose_config([], config_name="fit")
    assert OmegaConf.get_type(fit) is Fit and OmegaConf.get_type(fit.samples) is Samples


def test_the_yaml_states_no_declared_value() -> None:
    """trainer/ and eval/'s default files only extend their schema; config.yaml sets only
    `threads` of the top-level keys (its interpolation of VGP_THREADS)."""
    for group in ("trainer", "eval"):
        node = OmegaConf.load(CONFIG_DIR / group / "default.yaml")
        assert list(node) == ["defaults"] and node.defaults[-1] == "_self_"
    top = OmegaConf.load(CONFIG_DIR / "config.yaml")
    declared = {item.name for item in dataclasses.fields(TopLevel)}
    assert declared & set(top) == {"threads"}
    assert top.defaults[0] == "train_schema"
    fit = OmegaConf.load(CONFIG_DIR / "fit.yaml")
    assert {key.name.split(".")[0] for key in FIT_KEYS} & set(fit) == {"threads"}
    assert fit.defaults[0] == "fit_schema"


def test_the_composed_defaults_are_the_declared_ones() -> None:
    cfg = compose_config([])
    assert OmegaConf.to_object(cfg.trainer) == Trainer()
    assert OmegaConf.to_object(cfg.eval) == Eval()
    fit = compose_config([], config_name="fit")
    assert typed(Fit, fit) == Fit(threads=None)  # target and head: the YAML's, not typed


# A value of the wrong type for each declared kind (a str takes any scalar)
WRONG: dict[type, str] = {bool: "maybe", int: "abc", float: "abc", list: "abc"}


@pytest.mark.parametrize(
    "key",
    [key for key in TRAIN_TYPED if key.kind in WRONG and key.name != "threads"],  # threads: any
    ids=lambda key: key.name,  # text too (VGP_THREADS's), held by its rule
)
def test_hydra_refuses_a_value_of_the_wrong_type_naming_the_key(key: Key) -> None:
    cfg = compose_config([])
    with pytest.raises(ValidationError) as error:
        OmegaConf.update(cfg, key.name, WRONG[key.kind], merge=False)
    assert f"full_key: {key.name}" in str(error.value)


@pytest.mark.parametrize(
    "key", [key for key in TRAIN_TYPED if key.kind in WRONG], ids=lambda key: key.name
)
def test_a_bad_command_line_value_is_one_line_naming_the_key(key: Key) -> None:
    bad = WRONG[key.kind]
    problem = command_line_problem("vgp-train", ["-m", f"{key.name}={bad}"])
    assert problem == f"{key.name} {key.rule(bad)}, got {bad!r}"


def test_the_command_line_check_reads_sweeps_and_leaves_the_rest_to_hydra() -> None:
    assert command_line_problem("vgp-train", ["-m", "seed=0,1", "trainer.epochs=2,abc"]) == (
        "trainer.epochs must be an integer >= 1, got 'abc'"
    )
    assert command_line_problem("vgp-eval", ["eval.is_samples=0"]).startswith("eval.is_samples")
    fine = ["--cfg", "job", "seed=range(3)", "trainer.epochs=${seed}", "~trainer.grad_clip"]
    assert command_line_problem("vgp-train", [*fine, "model=dlgm2", "dataset.subset=abc"]) is None
    assert command_line_problem("vgp-fit", ["trainer.epochs=abc"]) is None  # not vgp-fit's key
    assert command_line_problem("vgp-fit", ["samples.plot=0"]) == (
        "samples.plot must be an integer >= 1, got 0"
    )


RUNNING_STUDY = sorted((REPO / "results" / "calibrated" / "runs").glob("*/config.yaml"))


@pytest.mark.parametrize("saved", RUNNING_STUDY, ids=lambda path: path.parent.name)
def test_a_saved_run_config_resumes_under_the_typed_composition(saved: Path) -> None:
    """The running study's runs (results/calibrated/, saved before the schemas) resume: their
    configs differ from today's composition only in keys a resume may change."""
    old = OmegaConf.to_container(OmegaConf.load(saved))
    assert isinstance(old, dict)
    overrides = [f"experiment={old['experiment_name']}", f"seed={old['seed']}"]
    current = OmegaConf.to_container(compose_config(overrides), resolve=True)
    assert isinstance(current, dict)
    changes = resume_changes(old, current, saved.parent)  # raises on a change it refuses
    assert all(is_resumable_key(key) for key in changes)
