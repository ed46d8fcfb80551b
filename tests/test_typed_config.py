"""The checked config's nodes as their declared dataclasses (run/config/typed.py)."""

from __future__ import annotations

from omegaconf import OmegaConf

from tests.helpers import compose_config
from vgp_bench.run.config.declarations import EarlyStopping, Eval, TopLevel, Trainer
from vgp_bench.run.config.typed import eval_settings, top_level, trainer_settings, typed


def test_the_default_config_reads_as_the_declared_defaults() -> None:
    cfg = compose_config([])
    assert trainer_settings(cfg) == Trainer()
    assert eval_settings(cfg) == Eval()
    assert top_level(cfg) == TopLevel()


def test_values_take_their_declared_types_and_overrides_arrive() -> None:
    cfg = compose_config(
        ["trainer.epochs=7", "trainer.grad_clip=2", "trainer.eval_at_epochs=[1,3]", "seed=5"]
    )
    trainer = trainer_settings(cfg)
    assert (trainer.epochs, trainer.eval_at_epochs, top_level(cfg).seed) == (7, [1, 3], 5)
    assert trainer.grad_clip == 2.0 and type(trainer.grad_clip) is float
    assert trainer.max_steps is None  # null stays null


def test_a_nested_node_is_its_dataclass_and_absent_keys_take_their_defaults() -> None:
    node = OmegaConf.create({"epochs": 3, "early_stopping": {"patience": 2}, "unknown": 1})
    trainer = typed(Trainer, node)
    assert trainer.early_stopping == EarlyStopping(patience=2, min_delta=0.0)
    assert trainer.epochs == 3 and trainer.batch_size == Trainer().batch_size
    assert typed(Trainer, {"early_stopping": None}).early_stopping == EarlyStopping()


def test_threads_read_as_the_check_accepts_them() -> None:
    assert typed(TopLevel, {"threads": " 2 "}).threads == 2  # VGP_THREADS's text
    assert typed(TopLevel, {"threads": ""}).threads is None
