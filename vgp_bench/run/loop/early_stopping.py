"""Early stopping on the validation bound, as Lightning's `EarlyStopping` (mode max): training
stops once `patience` epochs in a row gained less than `min_delta` nats over the bound of the
last epoch that did."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from vgp_bench.errors import ConfigError
from vgp_bench.run.config.declarations import Trainer
from vgp_bench.run.config.typed import eval_settings, trainer_settings
from vgp_bench.run.folder.checkpoint import RunState

EARLY_STOPPING = "early_stopping"
TEST_CHECKPOINTS = ("auto", "final", "best")


@dataclass(frozen=True)
class EarlyStopping:
    """`trainer.early_stopping`: patience in epochs (None: off) and the minimum gain in nats."""

    patience: int | None = None
    min_delta: float = 0.0

    @classmethod
    def from_settings(cls, trainer: Trainer) -> EarlyStopping:
        node = trainer.early_stopping
        return cls(node.patience, node.min_delta)

    @property
    def enabled(self) -> bool:
        return self.patience is not None

    def observe(self, state: RunState, valid_bound: float) -> bool:
        """Count one epoch's validation bound into `state`; True when training should stop.

        An epoch gains when its bound beats the reference (the bound of the last epoch that
        gained) by more than min_delta; a NaN bound never gains. The counters run whether or
        not early stopping is on, so a patience set on resume acts on the whole history.
        """
        if valid_bound > state.gain_reference + self.min_delta:
            state.gain_reference, state.epochs_without_gain = valid_bound, 0
        else:
            state.epochs_without_gain += 1
        if self.enabled and state.epochs_without_gain >= int(self.patience or 0):
            state.stop_reason = EARLY_STOPPING
        return state.stop_reason == EARLY_STOPPING


def checkpoint_to_test(cfg: DictConfig) -> str:
    """The parameters the final test evaluates: `best` (best.pt) or `final`; eval.checkpoint
    `auto` is best when early stopping is on, else final."""
    choice = eval_settings(cfg).checkpoint
    if choice not in TEST_CHECKPOINTS:
        raise ConfigError(f"eval.checkpoint must be {' or '.join(TEST_CHECKPOINTS)}, got {choice}")
    if choice == "auto":
        return "best" if EarlyStopping.from_settings(trainer_settings(cfg)).enabled else "final"
    return choice
