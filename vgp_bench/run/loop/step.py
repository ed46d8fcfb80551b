"""One optimizer step: the objective over Traces, its gradient over the global batch's shards,
and the update unless the bound or its gradient is not finite (vdvae's training step).

Each global batch is cut into `world_size * trainer.micro_batches` shards; shard k draws its
noise (and dynamic binarization) from its own generator, so one process with micro_batches = N
computes exactly what N ranks with one shard each compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from vgp_bench.estimators import training_bound
from vgp_bench.inference.base import extras_reported
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run.config.declarations import Trainer
from vgp_bench.run.loop.build import Components
from vgp_bench.run.loop.compilation import compile_mode, compile_with_fallback
from vgp_bench.run.loop.nonfinite import gradient_norm
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import make_generator


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
    ) -> BatchBound:
        trace = self.model(x, self.heads, n_samples, generator)
        batch_bound = self.per_example_bound(trace.log_weights).mean()
        if not with_terms:
            return BatchBound(batch_bound, {}, {})
        with torch.no_grad():  # for logging only
            terms = {name: value.mean() for name, value in trace.terms.items()}
            terms["log_q"] = trace.log_q.mean()
            if "log_likelihood" in trace.terms:  # the rest of the bound: a Monte Carlo KL
                terms["kl"] = (trace.log_q - trace.log_p + trace.terms["log_likelihood"]).mean()
        return BatchBound(batch_bound, terms, trace.extras)


class BatchBound(NamedTuple):
    """The objective on one batch."""

    bound: Tensor  # the batch's mean bound, differentiable
    terms: dict[str, Tensor]  # named means, for logging (empty unless asked)
    extras: dict[str, Tensor]  # the heads' diagnostics, `<site>/<name>` (empty unless asked)


class StepStats(NamedTuple):
    """What one step reports."""

    bound: Tensor  # the global batch's mean bound, detached (NaN after a failed Cholesky)
    terms: dict[str, Tensor]  # named means for logging, and grad_norm (empty unless asked)
    extras: dict[str, Tensor]  # the heads' diagnostics (of the last shard; empty unless asked)
    finite: bool  # the update was made
    stop: bool  # every rank agreed to stop after this step


def shard_seed(seed: int, shard: int) -> int:
    """The noise seed of data shard `shard` of every batch (shard 0 uses the run's seed)."""
    return seed + 1_000_003 * shard


class TrainingStep:
    """`step(indices)`: one update on the global batch `indices`, as the trainer config asks
    (objective, samples, micro-batches, gradient clipping, precision, DDP, torch.compile)."""

    def __init__(
        self, parts: Components, cfg: Trainer, seed: int, context: DistributedContext
    ) -> None:
        self.parts = parts
        self.cfg = cfg  # the trainer settings
        self.context = context
        shards_per_rank = cfg.micro_batches
        self.total_shards = context.world_size * shards_per_rank
        first_shard = context.rank * shards_per_rank
        self.local_shards = list(range(first_shard, first_shard + shards_per_rank))
        self.generators = [
            make_generator(parts.device, shard_seed(seed, shard)) for shard in self.local_shards
        ]
        self.per_example_bound = training_bound(cfg.objective)
        self.n_samples = cfg.n_samples
        self.grad_clip = cfg.grad_clip
        self.check_gradients = cfg.check_gradients
        self.bf16 = cfg.precision == "bf16"
        self.objective: Callable[..., Any] = BoundObjective(
            parts.model, parts.heads, self.per_example_bound
        )
        self.ddp: DistributedDataParallel | None = None
        self.graphed = False  # CUDA graphs: each call starts a new graph-replay step
        self.nonfinite_cause: str | None = None  # why the latest skipped step was skipped

    def prepare(self) -> None:
        """Wrap model and heads for DDP and torch.compile as the config asks (after resume)."""
        parts, cfg = self.parts, self.cfg
        objective: nn.Module = BoundObjective(parts.model, parts.heads, self.per_example_bound)
        if self.context.enabled:
            device_ids = [parts.device.index] if parts.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(
                objective,
                device_ids=device_ids,
                find_unused_parameters=cfg.find_unused_parameters,
            )
            objective = self.ddp
        self.objective = objective
        self.graphed = False
        if cfg.compile:
            mode = compile_mode(cfg.compile_mode, parts.device)
            self.objective = compile_with_fallback(objective, mode)
            self.graphed = mode == "reduce-overhead"

    def generator_states(self) -> list[Tensor]:
        """Every shard's generator state, in shard order (gathered from every rank)."""
        gathered = self.context.gather_objects(
            [generator.get_state() for generator in self.generators]
        )
        return [state for rank_states in gathered for state in rank_states]

    def load_generator_states(self, states: list[Tensor]) -> None:
        """Continue each of this rank's shards from its saved generator state."""
        for generator, shard in zip(self.generators, self.local_shards, strict=True):
            generator.set_state(states[shard])

    def __call__(
        self, indices: Tensor, stop_requested: bool = False, with_terms: bool = True
    ) -> StepStats:
        """One update on the global batch `indices` (the named terms only `with_terms`)."""
        parts = self.parts
        parts.optimizer.zero_grad(set_to_none=True)
        try:
            if self.total_shards == 1:  # the common case, without shard bookkeeping
                generator = self.generators[0]
                x = parts.data.train.gather(indices, generator)
                with self.autocast():
                    bound, terms, extras = self.call_objective(x, generator, with_terms)
                (-bound).backward()
                bound = bound.detach().float()
            else:
                bound, terms, extras = self.sharded_backward(indices, with_terms)
            self.nonfinite_cause = None
        except torch.linalg.LinAlgError as error:
            # a Cholesky that failed even at the largest jitter: a non-finite step like any
            # other (skipped, counted, the run stopped after trainer.max_nonfinite in a row).
            # Under DDP the other ranks are inside the collective of this step: fail instead.
            if self.context.enabled:
                raise
            parts.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_cause = " ".join(str(error).split())
            bound, terms, extras = torch.full((), math.nan, device=parts.device), {}, {}
        finite_tensor = torch.isfinite(bound)
        if self.grad_clip or self.check_gradients or with_terms:  # one more pass over gradients
            grad_norm = gradient_norm(parts.parameters, self.grad_clip)
            finite_tensor = finite_tensor & torch.isfinite(grad_norm)
            terms["grad_norm"] = grad_norm.detach()
        if self.context.enabled:  # every rank must agree to step and to stop
            flags = torch.stack([finite_tensor, torch.tensor(not stop_requested)])
            finite, keep_going = self.context.all_true(flags.to(parts.device)).tolist()
        else:
            finite, keep_going = bool(finite_tensor), not stop_requested  # the one sync a step
        if finite:
            parts.optimizer.step()
        return StepStats(bound, terms, extras, finite, not keep_going)

    def call_objective(self, x: Tensor, generator: torch.Generator, with_terms: bool) -> BatchBound:
        """The objective on one shard (a new CUDA-graph step first, when graphs are used)."""
        if self.graphed:
            torch.compiler.cudagraph_mark_step_begin()
        with extras_reported(self.parts.heads, with_terms):  # the heads' diagnostics: logged only
            return self.objective(x, self.n_samples, generator, with_terms)

    def autocast(self) -> Any:
        if self.bf16:
            return torch.autocast(device_type=self.parts.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def sharded_backward(
        self, indices: Tensor, with_terms: bool = True
    ) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
        """Accumulate the gradient of the global batch's mean bound over this rank's shards."""
        parts = self.parts
        shards = indices.tensor_split(self.total_shards)
        batch_size = indices.numel()
        # DDP averages gradients over ranks: scale each rank's share back to a sum
        scale = float(self.context.world_size)
        bound_total = torch.zeros((), device=parts.device)
        terms_total: dict[str, Tensor] = {}
        extras: dict[str, Tensor] = {}
        for position, (shard, generator) in enumerate(
            zip(self.local_shards, self.generators, strict=True)
        ):
            shard_indices = shards[shard]
            x = parts.data.train.gather(shard_indices, generator)
            last = position == len(self.local_shards) - 1
            sync = self.ddp.no_sync() if self.ddp is not None and not last else nullcontext()
            with sync:
                with self.autocast():
                    bound, terms, extras = self.call_objective(x, generator, with_terms)
                weight = shard_indices.numel() / batch_size * scale
                (-(bound.float() * weight)).backward()
            bound_total = bound_total + bound.detach().float() * weight
            for name, value in terms.items():
                terms_total[name] = terms_total.get(name, 0.0) + value.float() * weight
        return bound_total, terms_total, extras
