"""`vgp-train`: fit a model with a variational family, checkpoint, evaluate, record metrics."""

from __future__ import annotations

import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from vgp_bench.build import Components, build_components
from vgp_bench.checkpoint import (
    RunState,
    restore_training,
    save_checkpoint,
    training_checkpoint,
)
from vgp_bench.diagnostics import head_diagnostics
from vgp_bench.distributed import DistributedContext, init_distributed, shutdown_distributed
from vgp_bench.divergence import divergence
from vgp_bench.evaluate import evaluate_components, format_summary
from vgp_bench.failures import USER_ERRORS, NonFiniteTrainingError, log_failure, print_error
from vgp_bench.images import save_run_figures
from vgp_bench.metrics import (
    EpochEvaluation,
    EpochRecord,
    Evaluation,
    RunRecord,
    read_record,
    write_record,
)
from vgp_bench.run_folder import (
    RunPlan,
    agreed_plan,
    claimed,
    prepare_folder,
    run_logger,
    write_run_config,
)
from vgp_bench.runtime import CONFIG_DIR, ConfigError, code_version, make_generator
from vgp_bench.settings import check_train_settings
from vgp_bench.signals import EvaluationInterrupted, StopRequest, interruptible, stop_signals
from vgp_bench.step import StepStats, TrainingStep
from vgp_bench.writer import NullWriter, Writer, write_training_scalars

EXPECTED_ERRORS = (*USER_ERRORS, NonFiniteTrainingError)


class Trainer:
    """The training loop over Traces: it knows neither the model's nor the heads' internals.

    `fit` runs epochs of `TrainingStep`s, each ended by validation (`end_of_epoch`), and a final
    evaluation; checkpoints and metrics.json keep the run resumable bit for bit at any save.
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
        self.cfg, self.trainer_cfg, self.parts = cfg, cfg.trainer, parts
        self.context = context or DistributedContext()
        self.run_dir = Path(run_dir)
        self.checkpoint_dir = self.run_dir / "checkpoints"
        self.hydra_files = hydra_files or {}  # written into .hydra/ once the run may start
        self.training_step = TrainingStep(parts, cfg.trainer, int(cfg.seed), self.context)
        self.state = RunState()
        self.record = RunRecord()
        self.writer: Writer = NullWriter()
        self.stop_request = StopRequest()
        self.log = run_logger()
        self.epoch_bound_sum = torch.zeros((), device=parts.device)  # folded into state on save

    def prepare_objective(self) -> None:
        """Wrap model and heads for DDP and torch.compile as the config asks (after resume)."""
        self.training_step.prepare()

    @property
    def graphed_steps(self) -> bool:
        """Whether each step replays CUDA graphs (torch.compile's reduce-overhead mode)."""
        return self.training_step.graphed

    # -- the run -----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train (resuming when the run folder holds a checkpoint), then evaluate on test.

        Rank 0 holds the run folder's lock throughout and logs into its train.log; a start
        that is refused (see `plan_run`) changes nothing in the folder.
        """
        main = self.context.is_main
        claim = claimed(self.run_dir, "vgp-train") if main else nullcontext(self.log)
        with claim as log, stop_signals() as stop_request:
            self.log, self.stop_request = log, stop_request
            plan = agreed_plan(self.context, self.cfg, self.run_dir, self.total_shards, True)
            previous = self.run_dir / "metrics.json"
            if main:
                prepare_folder(self.run_dir, plan, self.log)
            resuming = main and plan.checkpoint is not None and previous.exists()
            self.record = read_record(previous) if resuming else RunRecord()
            try:
                return self._run(plan)
            except EvaluationInterrupted:
                return self.stop()
            except BaseException as error:
                error_text = log_failure(self.log, error, isinstance(error, EXPECTED_ERRORS))
                if main:
                    self.write_metrics("failed", error_text)
                    error.add_note(f"traceback in {self.run_dir / 'train.log'}")
                raise
            finally:
                self.writer.close()

    def _run(self, plan: RunPlan) -> dict[str, Any]:
        if plan.checkpoint is not None:
            self.state = restore_training(self.parts, plan.checkpoint)
            self.training_step.load_generator_states(plan.checkpoint["generators"])
        self.prepare_objective()
        data = self.parts.data
        self.record.describe(
            self.cfg, {**data.info, "split_sizes": data.split_sizes()}, code_version()
        )
        if plan.changes:
            changes = {"step": self.state.step, "changes": plan.changes}
            self.record.resume_changes = [*(self.record.resume_changes or []), changes]
        started = "resumed" if plan.checkpoint is not None else "started"
        changed = f"; changed: {plan.changes}" if plan.changes else ""
        self.log.info("%s at step %d in %s%s", started, self.state.step, self.run_dir, changed)
        if self.context.is_main:
            write_run_config(self.run_dir, self.cfg, self.hydra_files)
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        self.write_metrics("running")
        steps_before = self.state.step
        if not self.train_epochs():
            return self.stop()
        with interruptible(self.stop_request):
            self.final_evaluation(trained=self.state.step > steps_before)
        test = self.record.test
        self.record.update(divergence(None if test is None else test.data, data.x_shape))
        if self.record.diverged:
            self.log.warning("diverged: %s", self.record.diverged_reason)
        self.write_metrics("finished")
        self.log.info("finished at step %d", self.state.step)
        return self.record.to_json()

    def train_epochs(self) -> bool:
        """Epochs until the budget is spent (True), or until a stop signal (False)."""
        cfg = self.trainer_cfg
        with tqdm(
            total=self.steps_planned(),
            initial=self.state.step,
            desc="train",
            unit="step",
            disable=not (cfg.progress and self.context.is_main),
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
                    return False
                if completed:
                    self.state.epoch_end_pending = True
                    self.end_of_epoch()
                self.save()
                self.write_metrics("running")
        return True

    def stop(self) -> dict[str, Any]:
        """Checkpoint after a stop signal, and say how to resume."""
        self.save()
        self.write_metrics("interrupted")
        message = (
            f"{self.stop_request.name}: checkpoint saved in {self.checkpoint_dir}; run the same "
            "command again to resume"
        )
        self.log.info(message)
        if self.context.is_main:
            print(f"vgp-train: {message}", file=sys.stderr)
        return self.record.to_json()

    # -- the loop ----------------------------------------------------------------------------
    def run_epoch(self, stop_request: StopRequest, bar: tqdm) -> tuple[bool, bool]:
        """Train to the end of the epoch: (epoch completed, stop agreed by every rank)."""
        cfg, state = self.trainer_cfg, self.state
        train_split = self.parts.data.train
        batch_size, drop_last = int(cfg.batch_size), bool(cfg.drop_last)
        order = train_split.epoch_order(state.epoch, int(self.cfg.seed))
        batches = train_split.batch_indices(
            batch_size, order, start=state.batch_in_epoch, drop_last=drop_last
        )
        n_batches = train_split.batch_count(batch_size, drop_last)
        log_every = int(cfg.log_every)
        window_bound = torch.zeros((), device=self.parts.device)
        count, window_start, window_examples = 0, time.perf_counter(), 0
        for indices in batches:
            logging_step = (state.step + 1) % log_every == 0
            self.parts.schedule.apply(state.step)  # the step size of update number `step`
            stats = self.training_step(indices, bool(stop_request), with_terms=logging_step)
            state.batch_in_epoch += 1
            if stats.finite:
                state.step += 1
                state.nonfinite_in_row = 0
                self.epoch_bound_sum += stats.bound
                state.epoch_bound_count += 1
                window_bound += stats.bound
                count += 1
                window_examples += indices.numel()
                bar.update(1)
            else:
                self.on_nonfinite()
            if count and state.step % log_every == 0:
                elapsed = max(time.perf_counter() - window_start, 1e-9)
                self.log_window(window_bound / count, stats, window_examples / elapsed, bar)
                window_bound.zero_()
                count, window_start, window_examples = 0, time.perf_counter(), 0
            if stats.finite and state.step % int(cfg.checkpoint_every) == 0:
                self.save()
            if stats.stop or (self.finished_training() and state.batch_in_epoch < n_batches):
                return False, stats.stop  # stopped inside the epoch (a step budget ending on
                # its last batch still completes the epoch: validation, images, eval_at_epochs)
        state.epoch += 1
        state.batch_in_epoch = 0
        return True, False

    def log_window(
        self, window_bound: torch.Tensor, stats: StepStats, speed: float, bar: tqdm
    ) -> None:
        """TensorBoard scalars and the progress bar at the end of a logging window."""
        values = write_training_scalars(
            self.writer,
            window_bound,
            stats.terms,
            self.parts.schedule.current(),
            speed,
            self.state.step,
        )
        for site, head in self.parts.heads.items():  # kernel, jitter and the like
            for name, value in (getattr(head, "last_extras", None) or {}).items():
                self.writer.add_scalar(f"heads/{site}/{name}", float(value), self.state.step)
        bar.set_postfix(bound=f"{values['bound']:.2f}", refresh=False)

    def on_nonfinite(self) -> None:
        """Count a skipped step; stop the run after `trainer.max_nonfinite` in a row."""
        self.state.nonfinite_in_row += 1
        self.state.nonfinite_total += 1
        self.writer.add_scalar(
            "health/nonfinite_skipped", self.state.nonfinite_total, self.state.step
        )
        limit = int(self.trainer_cfg.max_nonfinite)
        cause = self.training_step.nonfinite_cause
        cause = f" ({cause})" if cause else ""
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
        cfg, parts, state = self.trainer_cfg, self.parts, self.state
        record = EpochRecord(epoch=state.epoch, step=state.step)
        self.fold_epoch_bound()
        if state.epoch_bound_count:
            record.train_bound = state.epoch_bound_sum / state.epoch_bound_count
            self.writer.add_scalar("train/epoch_bound", record.train_bound, state.step)
        with interruptible(self.stop_request):
            if parts.data.valid is not None and cfg.valid_samples:
                valid = Evaluation(
                    evaluate_components(
                        parts,
                        self.cfg.eval,
                        int(cfg.valid_samples),
                        self.context,
                        split_name="valid",
                        subset=cfg.valid_subset or 0,
                    )
                )
                # the training objective's value: IWAE's is the IS estimate at k = valid_samples
                iwae = str(cfg.objective) == "iwae"
                record.valid_bound = -(valid.nll if iwae else valid.bound_nll)
                self.writer.add_scalar("valid/bound", record.valid_bound, state.step)
                if record.valid_bound > state.best_valid_bound:
                    self.save("best.pt")
                    state.best_valid_bound = record.valid_bound
            if cfg.diagnostics_examples and parts.data.valid is not None and self.context.is_main:
                record.update(self.head_diagnostics(int(cfg.diagnostics_examples)))
            if state.epoch in [int(e) for e in cfg.eval_at_epochs]:
                test = Evaluation(
                    evaluate_components(
                        parts, self.cfg.eval, int(self.cfg.eval.epoch_is_samples), self.context
                    )
                )
                state.eval_at_epochs[str(state.epoch)] = EpochEvaluation(
                    test_bound_nll=test.bound_nll,
                    test_bound_nll_stderr=test.bound_nll_stderr,
                    test_nll=test.nll,
                    is_samples=test.is_samples,
                    n_examples=test.n_examples,
                ).to_json()
                self.writer.add_scalar("test/bound_nll", test.bound_nll, state.step)
            if cfg.image_every and state.epoch % int(cfg.image_every) == 0 and self.context.is_main:
                self.save_images()
        state.history.append(record.to_json())
        state.epoch_bound_sum, state.epoch_bound_count = 0.0, 0
        state.epoch_end_pending = False
        bounds = ", ".join(
            f"{k} {v:.3f}" for k, v in record.to_json().items() if k.endswith("bound")
        )
        self.log.info("epoch %d (step %d): %s", state.epoch, state.step, bounds)

    def final_evaluation(self, trained: bool) -> None:
        """The test evaluation at the end (unless the recorded one is of this very step)."""
        main, step = self.context.is_main, self.state.step
        figures = self.trainer_cfg.image_every and not (self.run_dir / "samples.png").exists()
        if trained and main and figures:
            self.save_images()  # a run stopped by max_steps inside its first epoch
        test = self.record.test
        current = test is not None and (step if test.step is None else test.step) == step
        if self.cfg.eval.at_end and (trained or not current):
            is_samples = int(self.cfg.eval.is_samples)
            self.log.info("evaluating on %s, %d samples", self.cfg.eval.split, is_samples)
            summary = evaluate_components(
                self.parts,
                self.cfg.eval,
                is_samples,
                self.context,
                progress=bool(self.trainer_cfg.progress),
                run_dir=self.run_dir,
                with_diagnostics=True,
            )
            self.record.test = Evaluation({**summary, "step": step})

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

    def save_images(self) -> None:
        """samples.png, reconstructions.png (and the model's own figures), and TensorBoard's."""
        parts = self.parts
        generator = make_generator(parts.device, int(self.cfg.seed) + 7)
        grids = save_run_figures(parts.model, parts.heads, parts.data.test, self.run_dir, generator)
        for name, grid in grids.items():
            self.writer.add_image(name, grid, self.state.step)

    # -- bookkeeping -------------------------------------------------------------------------
    @property
    def total_shards(self) -> int:
        return self.training_step.total_shards

    def finished_training(self) -> bool:
        max_steps = self.trainer_cfg.max_steps
        if max_steps is not None and self.state.step >= int(max_steps):
            return True
        return self.state.epoch >= int(self.trainer_cfg.epochs)

    def steps_planned(self) -> int:
        cfg = self.trainer_cfg
        per_epoch = self.parts.data.train.batch_count(int(cfg.batch_size), bool(cfg.drop_last))
        total = int(cfg.epochs) * per_epoch
        return total if cfg.max_steps is None else min(total, int(cfg.max_steps))

    def fold_epoch_bound(self) -> None:
        """Move the on-device running sum into the saved state (a host sync, at saves only)."""
        self.state.epoch_bound_sum += float(self.epoch_bound_sum)
        self.epoch_bound_sum.zero_()

    def save(self, name: str = "last.pt") -> None:
        """Checkpoint (every rank takes part: the shard generators are gathered to rank 0)."""
        self.fold_epoch_bound()
        generator_states = self.training_step.generator_states()
        if not all(bool(torch.isfinite(p).all()) for p in self.parts.parameters):
            raise NonFiniteTrainingError(
                f"parameters became NaN/Inf at step {self.state.step} (a non-finite gradient); "
                f"the last good checkpoint {self.checkpoint_dir / 'last.pt'} is kept; set "
                "trainer.grad_clip or trainer.check_gradients=true, or lower optim.optimizer.lr"
            )
        if self.context.is_main:
            checkpoint = training_checkpoint(self.parts, generator_states, self.state, self.cfg)
            save_checkpoint(checkpoint, self.checkpoint_dir / name)

    def write_metrics(self, status: str, error: str | None = None) -> None:
        if not self.context.is_main:
            return
        record, state = self.record, self.state
        record.status, record.error = status, error
        record.epochs_completed, record.steps = state.epoch, state.step
        record.wall_time_s = round(state.wall_time_s, 3)
        record.update({"history": state.history, "eval_at_epochs": state.eval_at_epochs})
        record.nonfinite_skipped = state.nonfinite_total
        record.world_size = self.context.world_size
        write_record(record, self.run_dir / "metrics.json")


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
        agreed_plan(context, cfg, run_dir, total_shards, False)  # refuse before loading anything
        parts = build_components(cfg, context=context)
        return Trainer(cfg, run_dir, parts, context, hydra_files).fit()
    finally:
        shutdown_distributed(context)


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
        print_error("vgp-train", error, expected=isinstance(error, EXPECTED_ERRORS))
        if hydra_cfg.mode == RunMode.MULTIRUN:
            return  # the run folder records the failure; the sweep goes on
        sys.exit(1)
    record = RunRecord(metrics)
    if record.status == "interrupted":
        sys.exit(130)
    if record.test is not None and int(os.environ.get("RANK", "0")) == 0:  # once under torchrun
        dataset = record.dataset
        name = None if dataset is None else dataset.name
        print(f"\n{record.model} + {record.inference} on {name} ({run_dir})")
        print(format_summary(record.test.data))


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
