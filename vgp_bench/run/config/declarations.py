"""vgp-train's top-level, `trainer` and `eval` keys as dataclasses: each field's type and default,
with its rule and effect beside it (field metadata) and what it does in its comment; schema.py's
Key lists derive from them, and Hydra's ConfigStore holds them as the schemas that configs/
extends (run/config/store.py), so that the YAML only chooses and overrides.

Imports neither torch nor Hydra.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import MISSING

from vgp_bench.run.config.rules import (
    Rule,
    boolean,
    device_name,
    integer,
    integer_list,
    non_empty_list,
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
    # CPU threads of torch; configs/config.yaml reads it from the environment (VGP_THREADS), whose
    # text a str keeps; null: torch's default, one per core, which on a machine with other jobs
    # can be 8x slower than 1
    threads: int | str | None = setting(None, threads_rule, OPERATIONAL, threads_value)
    data_dir: str = setting("data", text(), OPERATIONAL)  # relative to where vgp-train starts
    # set by experiment/ files; recorded in metrics.json
    experiment_name: str | None = setting(None, text(optional=True), OPERATIONAL)


@dataclass
class EarlyStopping:
    """trainer.early_stopping: Lightning's EarlyStopping on the validation bound (the stop reason
    and best epoch in metrics.json)."""

    # stop after this many epochs in a row that gain less than min_delta nats; null = off
    patience: int | None = setting(None, integer(1, optional=True), RESULT)
    min_delta: float = setting(0.0, number())


@dataclass
class Trainer:
    """The `trainer` group (configs/trainer/default.yaml extends it: trainer_schema)."""

    # CPU-sized default; experiment/table* files set the paper's budget
    epochs: int = setting(5, integer(1), RESULT)
    # stop after this many optimizer steps (overrides epochs when reached)
    max_steps: int | None = setting(None, integer(1, optional=True), RESULT)
    batch_size: int = setting(100, integer(1))
    # samples of z per data point in the training bound (k of iwae)
    n_samples: int = setting(1, integer(1))
    # elbo: mean of the n_samples bounds | iwae: log (1/k) sum_k w_k (estimators.TRAINING_BOUNDS)
    objective: str = setting("elbo", one_of("elbo", "iwae"))
    drop_last: bool = setting(False, boolean)
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)
    # false: the stored order every epoch (Burda et al. 2016)
    shuffle: bool = setting(True, boolean)
    # steps between TensorBoard scalars / progress-bar updates
    log_every: int = setting(50, integer(1), OPERATIONAL)
    # steps between checkpoints (also written every epoch)
    checkpoint_every: int = setting(1000, integer(1), OPERATIONAL)
    # samples per example for the validation bound (0 = no validation; iwae: its k)
    valid_samples: int = setting(1, integer(0), RESULT)
    # validate on the first N validation examples
    valid_subset: int | None = setting(None, integer(1, optional=True), RESULT)
    # validation examples for the heads' end-of-epoch statistics (the VGP's warp share and rank,
    # docs/design.md, section 5.2); 0 = off
    diagnostics_examples: int = setting(100, integer(0), OPERATIONAL)
    # epochs after which the test bound is recorded (Table 2 rows)
    eval_at_epochs: list[int] = setting([], integer_list(1), OPERATIONAL)  # noqa: RUF009
    # epochs between samples.png / reconstructions.png
    image_every: int = setting(1, integer(0), OPERATIONAL)
    grad_clip: float | None = setting(None, number(positive=True, optional=True))  # max grad norm
    # also skip updates with a NaN/Inf gradient norm (a pass over the gradients each step; the
    # bound is always checked, and checkpoints never hold NaN)
    check_gradients: bool = setting(False, boolean)
    # NaN/Inf bounds in a row before the run stops
    max_nonfinite: int = setting(10, integer(1), OPERATIONAL)
    progress: bool = setting(True, boolean, OPERATIONAL)
    # resume from checkpoints/last.pt when the run folder has one
    resume: bool = setting(True, boolean, OPERATIONAL)
    # a new run in a folder that holds one (resume=false, or nothing to resume from) moves the
    # old run to <folder>.replaced-<time>/ instead of refusing
    move_aside: bool = setting(False, boolean, OPERATIONAL)
    # a checkpoint whose model p(x, z) starts this run (its weights only; the inference heads
    # start fresh; the model config must match)
    init_model: str | None = setting(None, text(optional=True))
    # false: the model's parameters stay fixed and only the inference heads train (with
    # init_model: how much of a decoder's bound gap a family closes, the approximation-gap
    # protocol of Cremer et al. 2018)
    train_model: bool = setting(True, boolean)
    # split each batch into this many shards per process (memory; DDP parity)
    micro_batches: int = setting(1, integer(1))
    # torch.compile model and heads (falls back to eager with a warning)
    compile: bool = setting(False, boolean, OPERATIONAL)
    # auto: reduce-overhead (CUDA graphs) on CUDA, default on CPU | default | reduce-overhead |
    # max-autotune (compilation.COMPILE_MODES)
    compile_mode: str = setting(
        "auto", one_of("auto", "default", "reduce-overhead", "max-autotune"), OPERATIONAL
    )
    # fp32 | bf16 (autocast; the GP algebra stays float32)
    precision: str = setting("fp32", one_of("fp32", "bf16"))
    # DDP: set true if a head leaves parameters unused
    find_unused_parameters: bool = setting(False, boolean, OPERATIONAL)
    # cap of this process's share of GPU memory (N jobs per GPU: ~0.9 / N)
    gpu_memory_fraction: float | None = setting(
        None, number(positive=True, optional=True, at_most=1), OPERATIONAL
    )
    # torchrun: null picks nccl on CUDA, gloo on CPU; naming one also runs the DDP path with a
    # single rank (make gpu-check: one-rank NCCL); torch.distributed's backends
    ddp_backend: str | None = setting(
        None, one_of("nccl", "gloo", "mpi", "ucc", optional=True), OPERATIONAL
    )


@dataclass
class Eval:
    """The `eval` group (configs/eval/default.yaml extends it: eval_schema): every
    evaluation setting is resumable."""

    # importance samples per test example (tables: 5000)
    is_samples: int = setting(500, integer(1), OPERATIONAL)
    # samples per example for trainer.eval_at_epochs
    epoch_is_samples: int = setting(100, integer(1), OPERATIONAL)
    # samples evaluated at once; memory ~ chunk_size * batch_size * pixels
    chunk_size: int = setting(100, integer(1), OPERATIONAL)
    batch_size: int = setting(100, integer(1), OPERATIONAL)
    split: str = setting("test", one_of("train", "valid", "test"), OPERATIONAL)
    # evaluate on the first N examples (null = the whole split)
    subset: int | None = setting(2000, integer(1, optional=True), OPERATIONAL)
    # write <split>_per_example_k<K>[...].h5 in the run folder (docs/run-folder.md)
    save_per_example: bool = setting(False, boolean, OPERATIONAL)
    # what the final test evaluates: final | best (best.pt) | auto (best with
    # trainer.early_stopping on, else final)
    checkpoint: str = setting("auto", one_of("auto", "final", "best"), RESULT)
    at_end: bool = setting(True, boolean, OPERATIONAL)  # evaluate when training finishes
    seed: int = setting(1234, integer(), OPERATIONAL)
    # VGP: the auxiliary gap (bound at K = 0 minus the bound with aux_gap_samples auxiliary
    # samples) on the first N examples of the split, aux_gap_draws z each, at the final
    # evaluation; 0 examples = off
    aux_gap_examples: int = setting(500, integer(0), OPERATIONAL)
    aux_gap_samples: int = setting(256, integer(1), OPERATIONAL)
    aux_gap_draws: int = setting(10, integer(1), OPERATIONAL)
    # auto: at most the training's own work (examples x draws x samples against the examples
    # trained; a smoke run skips it, a table run gets all N, and the result says what was left
    # out) | full: always all N examples
    aux_gap_budget: str = setting("auto", one_of("auto", "full"), OPERATIONAL)


@dataclass
class Samples:
    """vgp-fit's `samples`: the draws of each estimate."""

    per_step: int = setting(256, integer(1))  # Monte Carlo samples per optimization step
    bound: int = setting(10000, integer(1))  # draws for the reported bound
    importance: int = setting(1000, integer(1))  # importance samples for the log Z estimate
    plot: int = setting(200000, integer(1))  # draws for each family's histogram


@dataclass
class Fit:
    """vgp-fit's keys (configs/fit.yaml extends them: fit_schema), in the composed config's
    order; no resume and no report read them. `target` and `head` hold the density's and each
    family's options, checked by what they build."""

    target: Any = MISSING  # no rule: the options of what it builds, which checks them
    seed: int = setting(0, integer())
    threads: int | str | None = setting(None, threads_rule, read=threads_value)  # as TopLevel's
    steps: int = setting(2000, integer(1))
    # Adam, decayed on a cosine to final_learning_rate
    learning_rate: float = setting(0.02, number(positive=True))
    final_learning_rate: float = setting(5.0e-4, number(positive=True))
    # a VGP starts as z = xi + noise of this scale; null: the head's own start
    identity_start: float | None = setting(0.3, number(optional=True))
    # any configs/inference/ file (mean_field: vae.yaml)
    families: list[str] = setting(  # noqa: RUF009
        ["vgp", "mean_field", "planar_flow", "hvi"], non_empty_list
    )
    head: Any = MISSING  # each family's options (configs/fit.yaml), checked by its head
    samples: Samples = field(default_factory=Samples)
    # PNG path; default fit-<target>.png in the Hydra run dir
    out: str | None = setting(None, text(optional=True))


def value_kind(hint: Any) -> type:
    """bool, int, float, str or list: the kind of a field's values, the first of a union's
    (`threads`: int, also as VGP_THREADS's text), Optional left out."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
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
        if "rule" not in item.metadata:  # a node of options (Fit.target, Fit.head)
            continue
        found.append(
            (name, value_kind(hints[item.name]), item.metadata["rule"], item.metadata["effect"])
        )
    return found
