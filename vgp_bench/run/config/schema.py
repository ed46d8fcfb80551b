"""Every fixed config key declared once: its type, its check, and what a change of it does.

The settings checks (`settings.py`), the keys a resume may change and the report's rows
(`config/keys.py`) are derived from these declarations; tests/test_config/schema.py holds them
to the YAML in configs/. The other options of a `_target_` (a model's, an inference head's, a
dataset loader's or an optimizer's arguments) are checked by what they build and typed by their
YAML (`settings.check_declared_types`). Imports neither torch nor Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vgp_bench.run.config.rules import (
    Rule,
    boolean,
    device_name,
    integer,
    integer_list,
    non_empty_list,
    number,
    one_of,
    target_node,
    text,
    threads_rule,
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


@dataclass(frozen=True)
class Key:
    """One config key: its dotted name, the type of its values, its rule and its effect."""

    name: str
    kind: type  # bool, int, float, str, list, or dict for a node; null is the rule's to accept
    rule: Rule
    effect: Effect = Effect.TRAINING


TRAINING, RESULT, OPERATIONAL, REPLICATE = (
    Effect.TRAINING,
    Effect.RESULT,
    Effect.OPERATIONAL,
    Effect.REPLICATE,
)

# vgp-train's top-level keys (configs/config.yaml)
TOP_LEVEL_KEYS = (
    Key("seed", int, integer(), REPLICATE),
    Key("device", str, device_name, OPERATIONAL),
    Key("threads", int, threads_rule, OPERATIONAL),
    Key("data_dir", str, text(), OPERATIONAL),
    Key("experiment_name", str, text(optional=True), OPERATIONAL),
)

# configs/trainer/default.yaml
TRAINER_KEYS = (
    Key("trainer.epochs", int, integer(1), RESULT),
    Key("trainer.max_steps", int, integer(1, optional=True), RESULT),
    Key("trainer.batch_size", int, integer(1)),
    Key("trainer.n_samples", int, integer(1)),
    Key("trainer.objective", str, one_of("elbo", "iwae")),  # estimators.TRAINING_BOUNDS
    Key("trainer.drop_last", bool, boolean),
    Key("trainer.early_stopping.patience", int, integer(1, optional=True), RESULT),
    Key("trainer.early_stopping.min_delta", float, number()),
    Key("trainer.shuffle", bool, boolean),
    Key("trainer.log_every", int, integer(1), OPERATIONAL),
    Key("trainer.checkpoint_every", int, integer(1), OPERATIONAL),
    Key("trainer.valid_samples", int, integer(0), RESULT),
    Key("trainer.valid_subset", int, integer(1, optional=True), RESULT),
    Key("trainer.diagnostics_examples", int, integer(0), OPERATIONAL),
    Key("trainer.eval_at_epochs", list, integer_list(1), OPERATIONAL),
    Key("trainer.image_every", int, integer(0), OPERATIONAL),
    Key("trainer.grad_clip", float, number(positive=True, optional=True)),
    Key("trainer.check_gradients", bool, boolean),
    Key("trainer.max_nonfinite", int, integer(1), OPERATIONAL),
    Key("trainer.progress", bool, boolean, OPERATIONAL),
    Key("trainer.resume", bool, boolean, OPERATIONAL),
    Key("trainer.move_aside", bool, boolean, OPERATIONAL),
    Key("trainer.init_model", str, text(optional=True)),
    Key("trainer.train_model", bool, boolean),
    Key("trainer.micro_batches", int, integer(1)),
    Key("trainer.compile", bool, boolean, OPERATIONAL),
    Key(  # compilation.COMPILE_MODES
        "trainer.compile_mode",
        str,
        one_of("auto", "default", "reduce-overhead", "max-autotune"),
        OPERATIONAL,
    ),
    Key("trainer.precision", str, one_of("fp32", "bf16")),
    Key("trainer.find_unused_parameters", bool, boolean, OPERATIONAL),
    Key(
        "trainer.gpu_memory_fraction",
        float,
        number(positive=True, optional=True, at_most=1),
        OPERATIONAL,
    ),
    Key(  # torch.distributed's backends
        "trainer.ddp_backend", str, one_of("nccl", "gloo", "mpi", "ucc", optional=True), OPERATIONAL
    ),
)

# configs/eval/default.yaml: every evaluation setting is resumable
EVAL_KEYS = (
    Key("eval.is_samples", int, integer(1), OPERATIONAL),
    Key("eval.epoch_is_samples", int, integer(1), OPERATIONAL),
    Key("eval.chunk_size", int, integer(1), OPERATIONAL),
    Key("eval.batch_size", int, integer(1), OPERATIONAL),
    Key("eval.split", str, one_of("train", "valid", "test"), OPERATIONAL),
    Key("eval.subset", int, integer(1, optional=True), OPERATIONAL),
    Key("eval.save_per_example", bool, boolean, OPERATIONAL),
    Key("eval.checkpoint", str, one_of("auto", "final", "best"), RESULT),
    Key("eval.at_end", bool, boolean, OPERATIONAL),
    Key("eval.seed", int, integer(), OPERATIONAL),
    Key("eval.aux_gap_examples", int, integer(0), OPERATIONAL),
    Key("eval.aux_gap_samples", int, integer(1), OPERATIONAL),
    Key("eval.aux_gap_draws", int, integer(1), OPERATIONAL),
    Key("eval.aux_gap_budget", str, one_of("auto", "full"), OPERATIONAL),
)

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

# vgp-fit's config (configs/fit.yaml; no resume, no report); `head` holds each family's
# options and `target` the density's, both checked by what they build
FIT_KEYS = (
    Key("seed", int, integer()),
    Key("threads", int, threads_rule),
    Key("steps", int, integer(1)),
    Key("learning_rate", float, number(positive=True)),
    Key("final_learning_rate", float, number(positive=True)),
    Key("identity_start", float, number(optional=True)),
    Key("families", list, non_empty_list),
    Key("samples.per_step", int, integer(1)),
    Key("samples.bound", int, integer(1)),
    Key("samples.importance", int, integer(1)),
    Key("samples.plot", int, integer(1)),
    Key("out", str, text(optional=True)),
)
