"""`vgp-train`: fit a model with a variational family, checkpoint, evaluate, record metrics."""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from vgp_bench.checkpoint import load_checkpoint, save_checkpoint, write_json
from vgp_bench.data.base import CorruptDataError, DatasetBundle, ImageSplit, MissingDataError
from vgp_bench.diagnostics import auxiliary_gap, head_diagnostics
from vgp_bench.distributed import DistributedContext, init_distributed, shutdown_distributed
from vgp_bench.divergence import divergence_reason, trivial_nll
from vgp_bench.estimators import training_bound
from vgp_bench.evaluate import estimate_split, format_summary, save_per_example
from vgp_bench.images import reconstruction_pairs, save_grid
from vgp_bench.inference.base import build_heads
from vgp_bench.metrics import family_structure
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run_folder import (
    RunFolderError,
    check_fresh_start,
    claimed,
    clear_orphans,
    log_failure,
    move_aside,
    one_line_error,
    refuse_if_locked,
    resume_changes,
    run_logger,
)
from vgp_bench.runtime import (
    CONFIG_DIR,
    ConfigError,
    build,
    code_version,
    config_name,
    limit_gpu_memory,
    make_generator,
    resolve_device,
)
from vgp_bench.schedules import StepSizeSchedule
from vgp_bench.settings import check_eval_settings, check_train_settings

USER_ERRORS = (ConfigError, MissingDataError, CorruptDataError, FileNotFoundError, ValueError)


class NonFiniteTrainingError(RuntimeError):
    """Too many non-finite bounds in a row."""


class EvaluationInterrupted(BaseException):
    """A stop signal during an evaluation: it is abandoned at once, and a rerun redoes it."""


@dataclass
class StopRequest:
    """What the SIGINT/SIGTERM handler recorded; during an evaluation it raises instead."""

    signal: int | None = None
    evaluating: bool = False

    def __bool__(self) -> bool:
        return self.signal is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signal or signal.SIGTERM).name


@contextmanager
def interruptible(request: StopRequest) -> Iterator[None]:
    """Inside, a stop signal abandons the work at once (raising EvaluationInterrupted)."""
    if request:
        raise EvaluationInterrupted(request.name)
    request.evaluating = True
    try:
        yield
    finally:
        request.evaluating = False


@dataclass
class RunPlan:
    """What a start does to its run folder, decided before anything is written."""

    checkpoint: dict[str, Any] | None = None  # to resume from
    changes: dict[str, list[Any]] = field(default_factory=dict)  # accepted config changes
    move_to: Path | None = None  # where the folder's old run goes first


@dataclass
class Components:
    """Everything a run is built from its config."""

    data: DatasetBundle
    model: LatentVariableModel
    heads: nn.ModuleDict
    optimizer: torch.optim.Optimizer
    schedule: StepSizeSchedule
    device: torch.device

    @property
    def parameters(self) -> list[nn.Parameter]:
        return [*self.model.parameters(), *self.heads.parameters()]


@dataclass
class RunState:
    """The loop's position and bookkeeping; saved with every checkpoint."""

    step: int = 0
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of the current epoch already done
    history: list[dict[str, Any]] = field(default_factory=list)
    best_valid_bound: float = -math.inf
    nonfinite_in_row: int = 0
    nonfinite_total: int = 0
    wall_time_s: float = 0.0
    eval_at_epochs: dict[str, dict[str, Any]] = field(default_factory=dict)
    epoch_bound_sum: float = 0.0  # training bounds summed over this epoch's finite steps
    epoch_bound_count: int = 0
    epoch_end_pending: bool = False  # an epoch ended but its validation/images are not done


class BoundObjective(nn.Module):
    """Model and heads as one module (what DDP wraps): a batch's mean bound and named terms."""

    def __init__(
        self,
        model: LatentVariableModel,
        heads: nn.ModuleDict,
        per_example_bound: Callable[[Tensor], Tensor],
    ) -> None:
        super().__init__()
        self.model = model
        self.heads = heads
        self.per_example_bound = per_example_bound  # trainer.objective: log w [S, B] -> [B]

    def forward(
        self, x: Tensor, n_samples: int, generator: torch.Generator, with_terms: bool = True
    ) -> tuple[Tensor, dict[str, Tensor]]:
        trace = self.model(x, self.heads, n_samples, generator)
        batch_bound = self.per_example_bound(trace.log_weights).mean()
        if not with_terms:
            return batch_bound, {}
        with torch.no_grad():  # for logging only
            terms = {name: value.mean() for name, value in trace.terms.items()}
            terms["log_q"] = trace.log_q.mean()
            if "log_likelihood" in trace.terms:  # the rest of the bound: a Monte Carlo KL
                terms["kl"] = (trace.log_q - trace.log_p + trace.terms["log_likelihood"]).mean()
        return batch_bound, terms


class NullWriter:
    """Stands in for TensorBoard on ranks other than 0."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None: ...

    def add_image(self, *args: Any, **kwargs: Any) -> None: ...

    def close(self) -> None: ...


def load_data(cfg: DictConfig) -> DatasetBundle:
    """Build the dataset of `cfg.dataset` with the absolute data folder."""
    data_dir = str(Path(cfg.data_dir).expanduser().resolve())
    return build(cfg.dataset, data_dir=data_dir)


def build_components(
    cfg: DictConfig, data: DatasetBundle | None = None, context: DistributedContext | None = None
) -> Components:
    """Dataset, model, heads, optimizer and schedule from the config (parameters seeded)."""
    device = resolve_device(str(cfg.device))
    if context is not None and context.enabled and device.type == "cuda":
        device = torch.device("cuda", context.local_rank)
    limit_gpu_memory(device, cfg.trainer.get("gpu_memory_fraction"))
    data = load_data(cfg) if data is None else data
    torch.manual_seed(int(cfg.seed))  # parameter initialisation
    model = build(cfg.model, x_shape=data.x_shape).to(device)
    heads = build_heads(build(cfg.inference), model.sites).to(device)
    parameters = [*model.parameters(), *heads.parameters()]
    optimizer = build(cfg.optim.optimizer, params=parameters, **multi_tensor_update(cfg))
    schedule = StepSizeSchedule(optimizer, build(cfg.optim.schedule))
    return Components(data.to(device), model, heads, optimizer, schedule, device)


def multi_tensor_update(cfg: DictConfig) -> dict[str, bool]:
    """`foreach=True` unless the optimizer config sets it: torch's optimizers loop over the
    parameters one tensor at a time on CPU; the multi-tensor update computes the same numbers
    (bit for bit, tests/test_train.py) with one dispatch per operation instead of one per tensor.
    """
    node = cfg.optim.optimizer
    if "foreach" in node:
        return {}
    target = get_class(str(node._target_))
    return {"foreach": True} if "foreach" in inspect.signature(target).parameters else {}


def plan_run(cfg: DictConfig, run_dir: Path, total_shards: int, holding_lock: bool) -> RunPlan:
    """Decide how a start treats `run_dir`, or refuse; reads the folder and writes nothing.

    Refused: a folder another process holds; a resume whose config differs in a key that
    changes what the run computes, or whose data shards differ; any start that would
    overwrite a run (see `check_fresh_start`).
    """
    if not holding_lock:
        refuse_if_locked(run_dir)
    current = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(current, dict)
    trainer = cfg.trainer
    last = run_dir / "checkpoints" / "last.pt"
    if trainer.resume and last.exists():
        checkpoint = load_checkpoint(last, map_location="cpu")
        changes = resume_changes(checkpoint["config"], current, run_dir)
        saved_shards = len(checkpoint["generators"])
        if saved_shards != total_shards:
            raise RunFolderError(
                f"{last} was written with {saved_shards} data shards (ranks x "
                f"trainer.micro_batches) but this run has {total_shards}; resume with the "
                "same number of processes and micro-batches"
            )
        return RunPlan(checkpoint, changes)
    saved_config = run_dir / "config.yaml"
    if trainer.resume and saved_config.is_file() and not any(run_dir.glob("checkpoints/*.pt")):
        # an attempt that stopped before its first checkpoint: nothing to lose by restarting
        # it, as long as it is the same run
        saved = OmegaConf.to_container(OmegaConf.load(saved_config), resolve=True)
        assert isinstance(saved, dict)
        resume_changes(saved, current, run_dir)
        return RunPlan()
    move_to = check_fresh_start(run_dir, bool(trainer.resume), bool(trainer.get("move_aside")))
    return RunPlan(move_to=move_to)


def agreed(context: DistributedContext, decide: Callable[[], Any]) -> Any:
    """Run `decide` on rank 0; a refusal there is raised on every rank (the others get None)."""
    result, refusal = None, None
    if context.is_main:
        try:
            result = decide()
        except Exception as error:  # the other ranks must hear of it, or they wait forever
            refusal = error
    message = context.broadcast_object(None if refusal is None else str(refusal))
    if refusal is not None:
        raise refusal
    if message is not None:
        raise RunFolderError(message)
    return result


def divergence(test: dict[str, Any] | None, x_shape: tuple[int, ...]) -> dict[str, Any]:
    """What metrics.json records about divergence (see vgp_bench.divergence)."""
    trivial = trivial_nll(math.prod(x_shape))
    reason = divergence_reason(test, trivial) if test is not None else None
    return {"trivial_nll": trivial, "diverged": reason is not None, "diverged_reason": reason}


def describe_run(cfg: DictConfig, data: DatasetBundle) -> dict[str, Any]:
    """The provenance every metrics.json records (DESIGN.md section 5)."""
    inference = cfg.inference
    return {
        "experiment": cfg.get("experiment_name"),
        "model": config_name(cfg.model),
        "inference": config_name(inference),
        "objective": inference.get("objective"),
        "aux_samples": inference.get("aux_samples", 0),
        "structure": family_structure(inference),
        "seed": int(cfg.seed),
        "code_version": code_version(),
        "dataset": {**data.info, "split_sizes": data.split_sizes()},
        "optimizer": config_name(cfg.optim),
        "batch_size": int(cfg.trainer.batch_size),
        "train_samples": int(cfg.trainer.n_samples),
        "train_objective": str(cfg.trainer.objective),
    }


def shard_seed(seed: int, shard: int) -> int:
    """The noise seed of data shard `shard` of every batch (shard 0 uses the run's seed)."""
    return seed + 1_000_003 * shard


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """Turn SIGINT/SIGTERM into a request to checkpoint and stop after the current step;
    inside `interruptible` (evaluations) the work is abandoned at once."""
    request = StopRequest()
    previous = {}

    def handler(signum: int, _frame: Any) -> None:
        request.signal = signum
        if request.evaluating:
            request.evaluating = False  # one raise, even if the signal comes again
            raise EvaluationInterrupted(request.name)

    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        yield request
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune")


def compile_mode(requested: str, device: torch.device) -> str | None:
    """torch.compile's mode for `trainer.compile_mode` (None: torch's default mode).

    `auto` captures the step in CUDA graphs (reduce-overhead) on CUDA, where a batch-100 step
    is launch-bound, and keeps the default mode elsewhere (CUDA graphs need a GPU).
    """
    if requested not in COMPILE_MODES:
        raise ConfigError(
            f"trainer.compile_mode must be one of {list(COMPILE_MODES)}, got {requested!r}"
        )
    if requested == "auto":
        return "reduce-overhead" if device.type == "cuda" else None
    return None if requested == "default" else requested


def compile_with_fallback(module: nn.Module, mode: str | None = None) -> Callable[..., Any]:
    """torch.compile `module` (in `mode`); if compiling or its first call fails, warn and run
    eagerly."""
    try:
        compiled = torch.compile(module) if mode is None else torch.compile(module, mode=mode)
    except Exception as error:  # backend missing on this platform
        warnings.warn(
            f"trainer.compile: torch.compile unavailable ({error}); running eagerly", stacklevel=2
        )
        return module
    state = {"call": compiled}

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return state["call"](*args, **kwargs)
        except Exception as error:
            if state["call"] is module:
                raise
            warnings.warn(
                f"trainer.compile: compiled call failed ({type(error).__name__}: "
                f"{error}); falling back to eager mode",
                stacklevel=2,
            )
            state["call"] = module
            return module(*args, **kwargs)

    return call


def evaluate_components(
    parts: Components,
    eval_cfg: DictConfig,
    is_samples: int,
    context: DistributedContext,
    progress: bool = False,
    run_dir: Path | None = None,
    split_name: str | None = None,
    subset: int | None = None,
    with_diagnostics: bool = False,
) -> dict[str, Any]:
    """IS log-likelihood and bound on a split, sharded over ranks; per-example file when asked.

    `with_diagnostics` (final evaluations) adds the VGP's auxiliary gap on the first
    `eval.aux_gap_examples` examples.
    """
    split_name = split_name or str(eval_cfg.split)
    split: ImageSplit | None = getattr(parts.data, split_name, None)
    if split is None:
        raise ConfigError(f"eval.split={split_name} does not exist for this dataset")
    subset = subset if subset is not None else eval_cfg.subset
    if subset:
        split = split.subset(int(subset))
    indices = torch.arange(len(split))[context.rank :: context.world_size]
    estimate = estimate_split(
        parts.model,
        parts.heads,
        split.select(indices),
        is_samples,
        int(eval_cfg.chunk_size),
        int(eval_cfg.batch_size),
        make_generator(parts.device, int(eval_cfg.seed) + context.rank),
        parts.device,
        progress=progress and context.is_main,
        description=f"IS x{is_samples}",
    )
    if context.enabled:  # put every rank's examples back in split order
        pieces = context.gather_objects(
            (indices, estimate.log_likelihood, estimate.bound, estimate.pareto_k)
        )
        order = torch.cat([piece[0] for piece in pieces]).argsort()
        estimate.log_likelihood = torch.cat([piece[1] for piece in pieces])[order]
        estimate.bound = torch.cat([piece[2] for piece in pieces])[order]
        estimate.pareto_k = torch.cat([piece[3] for piece in pieces])[order]
    summary = estimate.summary()
    summary["split"] = split_name
    weights = {
        name: head.evaluation_weight
        for name, head in parts.heads.items()
        if hasattr(head, "evaluation_weight")
    }
    if weights:
        summary["weight"] = weights
    if with_diagnostics and int(eval_cfg.get("aux_gap_examples") or 0) > 0 and context.is_main:
        gap = auxiliary_gap(
            parts.model,
            parts.heads,
            split.subset(int(eval_cfg.aux_gap_examples)),
            int(eval_cfg.aux_gap_samples),
            int(eval_cfg.aux_gap_draws),
            make_generator(parts.device, int(eval_cfg.seed) + 1),
            parts.device,
        )
        summary.update(gap)
    if eval_cfg.save_per_example and run_dir is not None and context.is_main:
        path = run_dir / f"{split_name}_per_example_k{is_samples}.h5"
        save_per_example(estimate, path)
        summary["per_example_file"] = path.name
    return summary


class Trainer:
    """The training loop over Traces: it knows neither the model's nor the heads' internals.

    Each global batch is cut into `world_size * trainer.micro_batches` shards; shard k draws
    its noise (and dynamic binarization) from its own generator, so one process with
    micro_batches = N computes exactly what N ranks with one shard each compute.
    """

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: str | Path,
        parts: Components,
        context: DistributedContext | None = None,
        hydra_files: dict[str, Any] | None = None,
    ) -> None:
        check_train_settings(cfg)
        split = str(cfg.eval.split)
        if split not in ("train", "valid", "test") or getattr(parts.data, split, None) is None:
            raise ConfigError(f"eval.split={split} does not exist for this dataset")
        self.cfg = cfg
        self.trainer_cfg = cfg.trainer
        self.run_dir = Path(run_dir)
        self.parts = parts
        self.context = context or DistributedContext()
        self.hydra_files = hydra_files or {}  # written into .hydra/ once the run may start
        self.shards_per_rank = int(cfg.trainer.micro_batches)
        self.total_shards = self.context.world_size * self.shards_per_rank
        first_shard = self.context.rank * self.shards_per_rank
        self.local_shards = list(range(first_shard, first_shard + self.shards_per_rank))
        self.generators = [
            make_generator(parts.device, shard_seed(int(cfg.seed), shard))
            for shard in self.local_shards
        ]
        self.state = RunState()
        self.checkpoint_dir = self.run_dir / "checkpoints"
        self.metrics: dict[str, Any] = {}
        self.writer: SummaryWriter | NullWriter = NullWriter()
        self.epoch_bound_sum = torch.zeros((), device=parts.device)  # folded into state on save
        self.per_example_bound = training_bound(str(cfg.trainer.objective))
        self.objective: Callable[..., Any] = BoundObjective(
            parts.model, parts.heads, self.per_example_bound
        )
        self.ddp: DistributedDataParallel | None = None
        self.stop_request = StopRequest()
        self.log = run_logger()
        self.nonfinite_cause: str | None = None  # why the latest skipped step was skipped
        self.graphed_steps = False

    # -- set-up ------------------------------------------------------------------------------
    def prepare_objective(self) -> None:
        """Wrap model and heads for DDP and torch.compile as the config asks (after resume)."""
        objective: nn.Module = BoundObjective(
            self.parts.model, self.parts.heads, self.per_example_bound
        )
        if self.context.enabled:
            device_ids = [self.parts.device.index] if self.parts.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(
                objective,
                device_ids=device_ids,
                find_unused_parameters=bool(self.trainer_cfg.find_unused_parameters),
            )
            objective = self.ddp
        self.objective = objective
        self.graphed_steps = False  # CUDA graphs: each call starts a new graph-replay step
        if self.trainer_cfg.compile:
            requested = str(self.trainer_cfg.get("compile_mode", "auto"))
            mode = compile_mode(requested, self.parts.device)
            self.objective = compile_with_fallback(objective, mode)
            self.graphed_steps = mode == "reduce-overhead"

    def call_objective(self, x: Tensor, generator: torch.Generator, with_terms: bool) -> Any:
        """The objective on one shard (a new CUDA-graph step first, when graphs are used)."""
        if self.graphed_steps:
            torch.compiler.cudagraph_mark_step_begin()
        return self.objective(x, int(self.trainer_cfg.n_samples), generator, with_terms)

    def autocast(self) -> Any:
        if str(self.trainer_cfg.precision) == "bf16":
            return torch.autocast(device_type=self.parts.device.type, dtype=torch.bfloat16)
        return nullcontext()

    # -- bookkeeping -------------------------------------------------------------------------
    def save(self, name: str = "last.pt") -> None:
        """Checkpoint (every rank takes part: the shard generators are gathered to rank 0)."""
        self.fold_epoch_bound()
        generator_states = [
            state
            for rank_states in self.context.gather_objects(
                [generator.get_state() for generator in self.generators]
            )
            for state in rank_states
        ]
        parts = self.parts
        if not all(bool(torch.isfinite(p).all()) for p in parts.parameters):
            raise NonFiniteTrainingError(
                f"parameters became NaN/Inf at step {self.state.step} (a non-finite gradient); "
                f"the last good checkpoint {self.checkpoint_dir / 'last.pt'} is kept; set "
                "trainer.grad_clip or trainer.check_gradients=true, or lower optim.optimizer.lr"
            )
        if not self.context.is_main:
            return
        checkpoint = {
            "model": parts.model.state_dict(),
            "heads": parts.heads.state_dict(),
            "optimizer": parts.optimizer.state_dict(),
            "generators": generator_states,
            "state": asdict(self.state),
            "config": OmegaConf.to_container(self.cfg, resolve=True),
        }
        save_checkpoint(checkpoint, self.checkpoint_dir / name)

    def fold_epoch_bound(self) -> None:
        """Move the on-device running sum into the saved state (a host sync, at saves only)."""
        self.state.epoch_bound_sum += float(self.epoch_bound_sum)
        self.epoch_bound_sum.zero_()

    def write_metrics(self, status: str, error: str | None = None) -> None:
        if not self.context.is_main:
            return
        self.metrics.update(
            status=status,
            error=error,
            epochs_completed=self.state.epoch,
            steps=self.state.step,
            wall_time_s=round(self.state.wall_time_s, 3),
            history=self.state.history,
            eval_at_epochs=self.state.eval_at_epochs,
            nonfinite_skipped=self.state.nonfinite_total,
            world_size=self.context.world_size,
        )
        write_json(self.metrics, self.run_dir / "metrics.json")

    def plan(self) -> RunPlan:
        """`plan_run` on rank 0, its refusal on every rank; the checkpoint loaded everywhere."""
        plan = agreed(
            self.context, lambda: plan_run(self.cfg, self.run_dir, self.total_shards, True)
        )
        resume = self.context.broadcast_object(plan is not None and plan.checkpoint is not None)
        if not self.context.is_main:
            last = self.checkpoint_dir / "last.pt"
            plan = RunPlan(load_checkpoint(last, map_location="cpu") if resume else None)
        assert plan is not None
        return plan

    def resume(self, checkpoint: dict[str, Any]) -> None:
        """Load parameters, optimizer, generators and loop state from `checkpoint`."""
        states = checkpoint["generators"]
        parts = self.parts
        parts.model.load_state_dict(checkpoint["model"])
        parts.heads.load_state_dict(checkpoint["heads"])
        parts.optimizer.load_state_dict(checkpoint["optimizer"])
        for generator, shard in zip(self.generators, self.local_shards, strict=True):
            generator.set_state(states[shard])
        self.state = RunState(**checkpoint["state"])
        parts.schedule.apply(self.state.step)

    # -- the loop ----------------------------------------------------------------------------
    def finished_training(self) -> bool:
        max_steps = self.trainer_cfg.max_steps
        if max_steps is not None and self.state.step >= int(max_steps):
            return True
        return self.state.epoch >= int(self.trainer_cfg.epochs)

    def training_step(
        self, indices: Tensor, stop_requested: bool = False, with_terms: bool = True
    ) -> tuple[Tensor, dict[str, Tensor], bool, bool]:
        """One update on the global batch `indices`: (bound, terms, finite, stop agreed).

        The named terms (for logging) are computed only `with_terms`.
        """
        parts, cfg = self.parts, self.trainer_cfg
        parts.optimizer.zero_grad(set_to_none=True)
        try:
            if self.total_shards == 1:  # the common case, without shard bookkeeping
                generator = self.generators[0]
                x = parts.data.train.gather(indices, generator)
                with self.autocast():
                    bound, terms = self.call_objective(x, generator, with_terms)
                (-bound).backward()
                bound = bound.detach().float()
            else:
                bound, terms = self.sharded_backward(indices, with_terms)
            self.nonfinite_cause = None
        except torch.linalg.LinAlgError as error:
            # a Cholesky that failed even at the largest jitter: a non-finite step like any
            # other (skipped, counted, the run stopped after trainer.max_nonfinite in a row).
            # Under DDP the other ranks are inside the collective of this step: fail instead.
            if self.context.enabled:
                raise
            parts.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_cause = " ".join(str(error).split())
            bound, terms = torch.full((), math.nan, device=parts.device), {}
        finite_tensor = torch.isfinite(bound)
        if cfg.grad_clip or cfg.check_gradients or with_terms:  # one more pass over gradients
            grad_norm = self.gradient_norm()
            finite_tensor = finite_tensor & torch.isfinite(grad_norm)
            terms["grad_norm"] = grad_norm.detach()
        if self.context.enabled:  # every rank must agree to step and to stop
            flags = torch.stack([finite_tensor, torch.tensor(not stop_requested)])
            finite, keep_going = self.context.all_true(flags.to(parts.device)).tolist()
        else:
            finite, keep_going = bool(finite_tensor), not stop_requested  # the one sync a step
        if finite:
            parts.schedule.apply(self.state.step)
            parts.optimizer.step()
        return bound, terms, finite, not keep_going

    def gradient_norm(self) -> Tensor:
        """The global gradient norm, clipping to `trainer.grad_clip` when it is set."""
        clip = self.trainer_cfg.grad_clip
        if clip:
            return torch.nn.utils.clip_grad_norm_(self.parts.parameters, float(clip))
        gradients = [p.grad for p in self.parts.parameters if p.grad is not None]
        return torch.nn.utils.get_total_norm(gradients)  # no rescaling pass when not clipping

    def sharded_backward(
        self, indices: Tensor, with_terms: bool = True
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Accumulate the gradient of the global batch's mean bound over this rank's shards."""
        parts = self.parts
        shards = indices.tensor_split(self.total_shards)
        batch_size = indices.numel()
        # DDP averages gradients over ranks: scale each rank's share back to a sum
        scale = float(self.context.world_size)
        bound_total = torch.zeros((), device=parts.device)
        terms_total: dict[str, Tensor] = {}
        for position, (shard, generator) in enumerate(
            zip(self.local_shards, self.generators, strict=True)
        ):
            shard_indices = shards[shard]
            x = parts.data.train.gather(shard_indices, generator)
            last = position == len(self.local_shards) - 1
            sync = self.ddp.no_sync() if self.ddp is not None and not last else nullcontext()
            with sync:
                with self.autocast():
                    bound, terms = self.call_objective(x, generator, with_terms)
                weight = shard_indices.numel() / batch_size * scale
                (-(bound.float() * weight)).backward()
            bound_total = bound_total + bound.detach().float() * weight
            for name, value in terms.items():
                terms_total[name] = terms_total.get(name, 0.0) + value.float() * weight
        return bound_total, terms_total

    def log_scalars(
        self, window_bound: Tensor, terms: dict[str, Tensor], examples_per_s: float
    ) -> dict[str, float]:
        """TensorBoard scalars: the bound averaged over the logging window, the other terms
        of the latest step (so the loop adds nothing per step but the bound)."""
        values = {"bound": float(window_bound)}
        values.update({name: float(value) for name, value in terms.items()})
        values["lr"] = self.parts.schedule.current()
        values["examples_per_s"] = examples_per_s
        main_scalars = ("bound", "lr", "grad_norm", "examples_per_s")
        for name, value in values.items():
            prefix = "train" if name in main_scalars else "train_terms"
            self.writer.add_scalar(f"{prefix}/{name}", value, self.state.step)
        return values

    def log_head_extras(self) -> None:
        """Kernel hyperparameters, jitter and similar diagnostics the heads expose."""
        for site, head in self.parts.heads.items():
            for name, value in (getattr(head, "last_extras", None) or {}).items():
                self.writer.add_scalar(f"heads/{site}/{name}", float(value), self.state.step)

    def run_epoch(self, stop_request: StopRequest, bar: tqdm) -> tuple[bool, bool]:
        """Train to the end of the epoch: (epoch completed, stop agreed by every rank)."""
        cfg = self.trainer_cfg
        train_split = self.parts.data.train
        order = train_split.epoch_order(self.state.epoch, int(self.cfg.seed))
        batches = train_split.batch_indices(
            int(cfg.batch_size),
            order,
            start=self.state.batch_in_epoch,
            drop_last=bool(cfg.drop_last),
        )
        n_batches = train_split.batch_count(int(cfg.batch_size), bool(cfg.drop_last))
        log_every = int(cfg.log_every)
        window_bound = torch.zeros((), device=self.parts.device)
        count, window_start, window_examples = 0, time.perf_counter(), 0
        for indices in batches:
            logging_step = (self.state.step + 1) % log_every == 0
            bound, terms, finite, stop = self.training_step(
                indices, bool(stop_request), with_terms=logging_step
            )
            self.state.batch_in_epoch += 1
            if finite:
                self.state.step += 1
                self.state.nonfinite_in_row = 0
                self.epoch_bound_sum += bound
                self.state.epoch_bound_count += 1
                window_bound += bound
                count += 1
                window_examples += indices.numel()
                bar.update(1)
            else:
                self.on_nonfinite()
            if count and self.state.step % log_every == 0:
                elapsed = time.perf_counter() - window_start
                values = self.log_scalars(
                    window_bound / count, terms, window_examples / max(elapsed, 1e-9)
                )
                self.log_head_extras()
                bar.set_postfix(bound=f"{values['bound']:.2f}", refresh=False)
                window_bound.zero_()
                count, window_start, window_examples = 0, time.perf_counter(), 0
            if finite and self.state.step % int(cfg.checkpoint_every) == 0:
                self.save()
            if stop or (self.finished_training() and self.state.batch_in_epoch < n_batches):
                return False, stop  # stopped inside the epoch (a step budget ending on its
                # last batch still completes the epoch: validation, images, eval_at_epochs)
        self.state.epoch += 1
        self.state.batch_in_epoch = 0
        return True, False

    def on_nonfinite(self) -> None:
        self.state.nonfinite_in_row += 1
        self.state.nonfinite_total += 1
        self.writer.add_scalar(
            "health/nonfinite_skipped", self.state.nonfinite_total, self.state.step
        )
        limit = int(self.trainer_cfg.max_nonfinite)
        cause = f" ({self.nonfinite_cause})" if self.nonfinite_cause else ""
        self.log.warning("step %d skipped: non-finite bound or gradient%s", self.state.step, cause)
        if self.state.nonfinite_in_row >= limit:
            raise NonFiniteTrainingError(
                f"the bound or its gradient was NaN/Inf for {limit} steps in a row (step "
                f"{self.state.step}){cause}; the last good checkpoint is "
                f"{self.checkpoint_dir / 'last.pt'}; lower optim.optimizer.lr or set "
                "trainer.grad_clip"
            )

    def end_of_epoch(self) -> None:
        """Validation, best.pt, test bound at chosen epochs, images; then the history record.

        A stop signal abandons this at once; the checkpoint then says it is pending, and the
        resumed run does it first (it draws no training noise, so resume stays exact).
        """
        cfg, parts, epoch = self.trainer_cfg, self.parts, self.state.epoch
        record: dict[str, Any] = {"epoch": epoch, "step": self.state.step}
        self.fold_epoch_bound()
        if self.state.epoch_bound_count:
            record["train_bound"] = self.state.epoch_bound_sum / self.state.epoch_bound_count
            self.writer.add_scalar("train/epoch_bound", record["train_bound"], self.state.step)
        with interruptible(self.stop_request):
            if parts.data.valid is not None and cfg.valid_samples:
                summary = evaluate_components(
                    parts,
                    self.cfg.eval,
                    int(cfg.valid_samples),
                    self.context,
                    split_name="valid",
                    subset=cfg.valid_subset or 0,
                )
                # the training objective's value: IWAE's is the IS estimate at k = valid_samples
                iwae = str(self.cfg.trainer.objective) == "iwae"
                record["valid_bound"] = -summary["nll" if iwae else "bound_nll"]
                self.writer.add_scalar("valid/bound", record["valid_bound"], self.state.step)
                if record["valid_bound"] > self.state.best_valid_bound:
                    self.save("best.pt")
                    self.state.best_valid_bound = record["valid_bound"]
            if cfg.diagnostics_examples and parts.data.valid is not None and self.context.is_main:
                record.update(self.head_diagnostics(int(cfg.diagnostics_examples)))
            if epoch in [int(e) for e in cfg.eval_at_epochs]:
                summary = evaluate_components(
                    parts, self.cfg.eval, int(self.cfg.eval.epoch_is_samples), self.context
                )
                self.state.eval_at_epochs[str(epoch)] = {
                    "test_bound_nll": summary["bound_nll"],
                    "test_bound_nll_stderr": summary["bound_nll_stderr"],
                    "test_nll": summary["nll"],
                    "is_samples": summary["is_samples"],
                    "n_examples": summary["n_examples"],
                }
                self.writer.add_scalar("test/bound_nll", summary["bound_nll"], self.state.step)
            if cfg.image_every and epoch % int(cfg.image_every) == 0 and self.context.is_main:
                self.save_images()
        self.state.history.append(record)
        self.state.epoch_bound_sum, self.state.epoch_bound_count = 0.0, 0
        self.state.epoch_end_pending = False
        self.log.info(
            "epoch %d (step %d): %s",
            epoch,
            self.state.step,
            ", ".join(f"{k} {v:.3f}" for k, v in record.items() if k.endswith("bound")),
        )

    def head_diagnostics(self, count: int) -> dict[str, float]:
        """The heads' own statistics (the VGP's warp share) on the first `count` validation
        examples, with a fixed generator: the same draws every epoch."""
        parts = self.parts
        assert parts.data.valid is not None
        x = parts.data.valid.gather(torch.arange(min(count, len(parts.data.valid))))
        generator = make_generator(parts.device, int(self.cfg.eval.seed))
        stats = head_diagnostics(parts.model, parts.heads, x.to(parts.device), generator)
        for name, value in stats.items():
            self.writer.add_scalar(f"heads/{name}", value, self.state.step)
        return stats

    @torch.no_grad()
    def save_images(self, count: int = 64) -> None:
        parts = self.parts
        parts.model.eval()
        parts.heads.eval()
        image_generator = make_generator(parts.device, int(self.cfg.seed) + 7)
        grid = save_grid(parts.model.sample(count, image_generator), self.run_dir / "samples.png")
        self.writer.add_image("samples", grid, self.state.step)
        test = parts.data.test
        originals = test.gather(torch.arange(min(32, len(test))), image_generator)
        reconstructions = parts.model.reconstruct(originals, parts.heads, image_generator)
        grid = save_grid(
            reconstruction_pairs(originals, reconstructions),
            self.run_dir / "reconstructions.png",
            columns=16,
        )
        self.writer.add_image("reconstructions", grid, self.state.step)
        for name, images in parts.model.extra_figures(8, image_generator).items():
            save_grid(images, self.run_dir / f"{name}.png", columns=max(1, images.shape[0] // 8))
        parts.model.train()
        parts.heads.train()

    def steps_planned(self) -> int:
        cfg = self.trainer_cfg
        per_epoch = self.parts.data.train.batch_count(int(cfg.batch_size), bool(cfg.drop_last))
        total = int(cfg.epochs) * per_epoch
        return total if cfg.max_steps is None else min(total, int(cfg.max_steps))

    def fit(self) -> dict[str, Any]:
        """Train (resuming when the run folder holds a checkpoint), then evaluate on test.

        Rank 0 holds the run folder's lock throughout and logs into its train.log; a start
        that is refused (see `plan_run`) changes nothing in the folder.
        """
        claim = (
            claimed(self.run_dir, "vgp-train") if self.context.is_main else nullcontext(self.log)
        )
        with claim as log, stop_signals() as stop_request:
            self.log, self.stop_request = log, stop_request
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        plan = self.plan()
        main = self.context.is_main
        previous = self.run_dir / "metrics.json"
        if main and plan.move_to is not None:
            move_aside(self.run_dir, plan.move_to)
            print(f"vgp-train: moved the folder's previous run to {plan.move_to}", file=sys.stderr)
            self.log.info("moved the folder's previous run to %s", plan.move_to)
        if main:
            clear_orphans(self.run_dir, self.log)
        self.metrics = {}
        if main and plan.checkpoint is not None and previous.exists():
            self.metrics = json.loads(previous.read_text())
        try:
            return self._run(plan)
        except EvaluationInterrupted:
            self.save()
            self.write_metrics("interrupted")
            self.report_stop()
            return self.metrics
        except BaseException as error:
            expected = isinstance(error, (*USER_ERRORS, NonFiniteTrainingError))
            error_text = log_failure(self.log, error, expected)
            if main:
                self.write_metrics("failed", error_text)
                error.add_note(f"traceback in {self.run_dir / 'train.log'}")
            raise
        finally:
            self.writer.close()

    def report_stop(self) -> None:
        message = (
            f"{self.stop_request.name}: checkpoint saved in {self.checkpoint_dir}; run the same "
            "command again to resume"
        )
        self.log.info(message)
        if self.context.is_main:
            print(f"vgp-train: {message}", file=sys.stderr)

    def _run(self, plan: RunPlan) -> dict[str, Any]:
        cfg = self.trainer_cfg
        main = self.context.is_main
        if plan.checkpoint is not None:
            self.resume(plan.checkpoint)
        self.prepare_objective()
        self.metrics.update(describe_run(self.cfg, self.parts.data))
        if plan.changes:
            self.metrics.setdefault("resume_changes", []).append(
                {"step": self.state.step, "changes": plan.changes}
            )
        self.log.info(
            "%s at step %d in %s%s",
            "resumed" if plan.checkpoint is not None else "started",
            self.state.step,
            self.run_dir,
            f"; changed: {plan.changes}" if plan.changes else "",
        )
        if main:
            self.write_hydra_files()
            OmegaConf.save(self.cfg, self.run_dir / "config.yaml", resolve=True)
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.write_metrics("running")
        steps_before = self.state.step
        with tqdm(
            total=self.steps_planned(),
            initial=self.state.step,
            desc="train",
            unit="step",
            disable=not (cfg.progress and main),
            dynamic_ncols=True,
        ) as bar:
            if self.state.epoch_end_pending:  # stopped during its validation: do it now
                self.end_of_epoch()
                self.save()
            while not self.finished_training():
                started = time.perf_counter()
                completed, stop = self.run_epoch(self.stop_request, bar)
                self.state.wall_time_s += time.perf_counter() - started
                if stop:
                    self.save()
                    self.write_metrics("interrupted")
                    self.report_stop()
                    return self.metrics
                if completed:
                    self.state.epoch_end_pending = True
                    self.end_of_epoch()
                self.save()
                self.write_metrics("running")
        trained = self.state.step > steps_before
        with interruptible(self.stop_request):
            if trained and main and cfg.image_every and not (self.run_dir / "samples.png").exists():
                self.save_images()  # a run stopped by max_steps inside its first epoch
            test = self.metrics.get("test")
            step = self.state.step
            current = isinstance(test, dict) and test.get("step", step) == step
            if self.cfg.eval.at_end and (trained or not current):
                self.log.info("evaluating on %s, %d samples", self.cfg.eval.split, self.is_samples)
                summary = evaluate_components(
                    self.parts,
                    self.cfg.eval,
                    self.is_samples,
                    self.context,
                    progress=bool(cfg.progress),
                    run_dir=self.run_dir,
                    with_diagnostics=True,
                )
                self.metrics["test"] = {**summary, "step": self.state.step}
        self.metrics.update(divergence(self.metrics.get("test"), self.parts.data.x_shape))
        if self.metrics["diverged"]:
            self.log.warning("diverged: %s", self.metrics["diverged_reason"])
        self.write_metrics("finished")
        self.log.info("finished at step %d", self.state.step)
        return self.metrics

    @property
    def is_samples(self) -> int:
        return int(self.cfg.eval.is_samples)

    def write_hydra_files(self) -> None:
        """Hydra's .hydra/ record of the run, written only once the run may start."""
        for name, node in self.hydra_files.items():
            path = self.run_dir / ".hydra" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(OmegaConf.to_yaml(node))


def train(
    cfg: DictConfig, run_dir: str | Path, hydra_files: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train and evaluate one run in `run_dir`; returns the metrics also written to metrics.json.

    Every setting is checked, and the folder found fit for this run (see `plan_run`), before
    anything is loaded or written. Under torchrun every rank calls this; rank 0's run folder
    is used by all.
    """
    check_train_settings(cfg)
    context = init_distributed(cfg.trainer.get("ddp_backend"))
    try:
        run_dir = Path(context.broadcast_object(str(run_dir)))
        total_shards = context.world_size * int(cfg.trainer.micro_batches)
        agreed(context, lambda: plan_run(cfg, run_dir, total_shards, False))  # refuse early
        parts = build_components(cfg, context=context)
        return Trainer(cfg, run_dir, parts, context, hydra_files).fit()
    finally:
        shutdown_distributed(context)


def run_folder_of(checkpoint: Path) -> Path:
    """The run folder of `<run>/checkpoints/x.pt`, else the checkpoint's own folder."""
    parent = checkpoint.parent
    return parent.parent if parent.name == "checkpoints" else parent


def evaluate_checkpoint(
    checkpoint_path: str,
    eval_cfg: DictConfig,
    device_name: str = "auto",
    data_dir: str | None = None,
) -> dict[str, Any]:
    """Rebuild a run from its checkpoint, evaluate it, and add the result to its metrics.json.

    The evaluation is appended to `evaluations`; the run's own `test` result is never
    replaced (it is filled in only when the run has none). The folder is locked meanwhile,
    and the log goes to its eval.log.
    """
    check_eval_settings(OmegaConf.create({"eval": eval_cfg}))
    path = Path(checkpoint_path)
    checkpoint = load_checkpoint(path)
    cfg = OmegaConf.create(checkpoint["config"])
    cfg.device = device_name
    if data_dir is not None:
        cfg.data_dir = data_dir
    cfg.eval = OmegaConf.merge(cfg.eval, eval_cfg)
    run_dir = run_folder_of(path)
    refuse_if_locked(run_dir)
    parts = build_components(cfg)
    parts.model.load_state_dict(checkpoint["model"])
    parts.heads.load_state_dict(checkpoint["heads"])
    step = int(checkpoint.get("state", {}).get("step", -1))
    writable = os.access(run_dir, os.W_OK)
    claim = claimed(run_dir, "vgp-eval", log_name="eval.log") if writable else nullcontext(None)
    with claim as log, stop_signals() as request:
        log = log or logging.getLogger(__name__)
        if writable:
            clear_orphans(run_dir, log)
        log.info("evaluating %s (step %d): %s", path, step, OmegaConf.to_container(cfg.eval))
        try:
            with interruptible(request):
                summary = evaluate_components(
                    parts,
                    cfg.eval,
                    int(cfg.eval.is_samples),
                    DistributedContext(),
                    progress=True,
                    run_dir=run_dir if writable else None,
                    with_diagnostics=True,
                )
        except EvaluationInterrupted:
            log.info("interrupted; nothing was recorded")
            raise
        except BaseException as error:
            log_failure(log, error, isinstance(error, USER_ERRORS))
            if writable:
                error.add_note(f"traceback in {run_dir / 'eval.log'}")
            raise
        summary.update(
            checkpoint=path.name,
            step=step,
            subset=cfg.eval.subset,
            evaluated_at=datetime.now().astimezone().isoformat(timespec="seconds"),
        )
        metrics_path = run_dir / "metrics.json"
        if writable and metrics_path.exists():
            metrics = json.loads(metrics_path.read_text())
            summary["run_steps"] = metrics.get("steps")
            metrics.setdefault("evaluations", []).append(summary)
            metrics.setdefault("test", summary)
            write_json(metrics, metrics_path)
        log.info("result: %s", summary)
    return summary


def hydra_files(cfg: DictConfig) -> dict[str, Any]:
    """What Hydra writes into .hydra/ (config.yaml, hydra.yaml, overrides.yaml), to be written
    only when the run may start (configs/config.yaml sets hydra.output_subdir: null)."""
    hydra_cfg = HydraConfig.get()
    record = OmegaConf.create({"hydra": OmegaConf.to_container(hydra_cfg)})
    record.hydra.output_subdir = ".hydra"
    return {"config.yaml": cfg, "hydra.yaml": record, "overrides.yaml": hydra_cfg.overrides.task}


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    try:
        metrics = train(cfg, run_dir, hydra_files(cfg))
    except Exception as error:  # user errors and crashes alike: one line, the rest in the log
        expected = isinstance(error, (*USER_ERRORS, NonFiniteTrainingError))
        text = one_line_error(error, expected)
        notes = "; ".join(getattr(error, "__notes__", []))
        print(f"vgp-train: error: {text}" + (f" ({notes})" if notes else ""), file=sys.stderr)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            return  # the run folder records the failure; the sweep goes on
        sys.exit(1)
    if metrics.get("status") == "interrupted":
        sys.exit(130)
    if "test" in metrics and int(os.environ.get("RANK", "0")) == 0:  # once under torchrun
        print(
            f"\n{metrics.get('model')} + {metrics.get('inference')} on "
            f"{metrics.get('dataset', {}).get('name')} ({run_dir})"
        )
        print(format_summary(metrics["test"]))


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
