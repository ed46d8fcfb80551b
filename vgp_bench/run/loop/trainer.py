"""The training loop: epochs of steps, the end of an epoch (validation, early stopping,
checkpoints), the final test and the record of it all in the run folder."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from vgp_bench.errors import ConfigError
from vgp_bench.failures import USER_ERRORS, log_failure
from vgp_bench.figures.images import save_run_figures
from vgp_bench.run.config.typed import eval_settings, top_level, trainer_settings
from vgp_bench.run.folder.checkpoint import RunState, load_checkpoint
from vgp_bench.run.folder.metrics import EpochRecord
from vgp_bench.run.folder.run_folder import RunFolder, RunPlan
from vgp_bench.run.loggers import RunLogger
from vgp_bench.run.loop.build import Components
from vgp_bench.run.loop.early_stopping import EARLY_STOPPING, EarlyStopping, checkpoint_to_test
from vgp_bench.run.loop.epoch_evaluation import (
    epoch_test,
    final_test,
    head_statistics,
    validation_bound,
)
from vgp_bench.run.loop.evaluate import evaluation_journal
from vgp_bench.run.loop.nonfinite import NonFinitePolicy, check_finite_parameters
from vgp_bench.run.loop.step import TrainingStep
from vgp_bench.run.loop.training_checkpoint import (
    load_initial_model,
    restore_training,
    training_checkpoint,
)
from vgp_bench.run.loop.training_scalars import LoggingWindow
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import make_generator
from vgp_bench.run.process.signals import (
    EvaluationInterrupted,
    StopRequest,
    interruptible,
    stop_signals,
)


class Trainer:
    """The training loop over Traces: it knows neither the model's nor the heads' internals.

    `fit` runs epochs of `TrainingStep`s, ends each with validation (`end_of_epoch`), and
    evaluates on test at the end; checkpoints and metrics.json go to the `RunFolder`, and a
    resume from any checkpoint continues bit for bit.
    """

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: str | Path,
        parts: Components,
        context: DistributedContext | None = None,
        hydra_files: dict[str, Any] | None = None,
    ) -> None:
        self.settings, self.eval_settings = top_level(cfg), eval_settings(cfg)
        split = self.eval_settings.split
        if split not in ("train", "valid", "test") or getattr(parts.data, split, None) is None:
            raise ConfigError(f"eval.split={split} does not exist for this dataset")
        self.cfg, self.trainer_cfg, self.parts = cfg, trainer_settings(cfg), parts
        self.context = context or DistributedContext()
        self.folder = RunFolder(Path(run_dir), self.context, hydra_files or {})
        self.training_step = TrainingStep(parts, self.trainer_cfg, self.settings.seed, self.context)
        self.nonfinite = NonFinitePolicy(self.trainer_cfg.max_nonfinite)
        self.early_stopping = EarlyStopping.from_settings(self.trainer_cfg)
        validates = parts.data.valid is not None and self.trainer_cfg.valid_samples > 0
        if self.early_stopping.enabled and not validates:
            raise ConfigError(
                "trainer.early_stopping needs the validation bound: this run has no validation "
                "split or trainer.valid_samples=0"
            )
        self.test_checkpoint = checkpoint_to_test(cfg)
        # the budget, read once (the loop checks it every step; bench sets max_steps directly)
        self.max_steps: int | None = self.trainer_cfg.max_steps
        self.epochs = self.trainer_cfg.epochs
        self.checkpoint_every = self.trainer_cfg.checkpoint_every
        self.state = RunState()
        self.steps_at_start = 0
        self.loggers: RunLogger = RunLogger()  # TensorBoard, CSV, MLflow: the logger group
        self.stop_request = StopRequest()
        self.log = self.folder.log
        # float64, so that the epoch's sum does not depend on where a save split it: float32
        # bounds add exactly in float64, and a run resumed mid-epoch logs the same train bound
        self.epoch_bound_sum = torch.zeros((), dtype=torch.float64, device=parts.device)

    def fit(self) -> dict[str, Any]:
        """Train (resuming when the run folder holds a checkpoint), then evaluate on test.

        Rank 0 holds the run folder's lock throughout and logs into its train.log; a start
        that is refused (see `plan_run`) changes nothing in the folder.
        """
        with self.folder.claimed() as log, stop_signals() as stop_request:
            self.log, self.stop_request = log, stop_request
            plan = self.folder.start(self.cfg, self.training_step.total_shards, self.parts.data)
            try:
                self.start(plan)
                if not self.train_epochs():
                    return self.stop()
                with interruptible(self.stop_request):
                    self.final_evaluation()
                return self.finish()
            except EvaluationInterrupted:
                return self.stop()
            except BaseException as error:
                error_text = log_failure(self.log, error, isinstance(error, USER_ERRORS))
                if self.context.is_main:
                    try:
                        self.folder.record.record_failure(error_text)
                        self.folder.write_record()
                    except OSError as failed:  # a full disk: the error itself is the news
                        self.log.error("could not record the failure: %s", failed)
                    error.add_note(f"traceback in {self.folder.path / 'train.log'}")
                raise
            finally:
                self.loggers.close(self.folder.record.status or "failed")

    def train_epochs(self) -> bool:
        """Epochs until the budget is spent (True), or until a stop signal (False)."""
        with tqdm(
            total=self.steps_planned(),
            initial=self.state.step,
            desc="train",
            unit="step",
            disable=not (self.trainer_cfg.progress and self.context.is_main),
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

    def run_epoch(self, stop_request: StopRequest, bar: tqdm) -> tuple[bool, bool]:
        """Train to the end of the epoch: (epoch completed, stop agreed by every rank)."""
        cfg, state, train_split = self.trainer_cfg, self.state, self.parts.data.train
        batch_size, drop_last, log_every = cfg.batch_size, cfg.drop_last, cfg.log_every
        order = train_split.epoch_order(state.epoch, self.settings.seed, cfg.shuffle)
        batches = train_split.batch_indices(batch_size, order, state.batch_in_epoch, drop_last)
        n_batches = train_split.batch_count(batch_size, drop_last)
        window = LoggingWindow(self.parts.device)
        for indices in batches:
            self.parts.schedule.apply(state.step)  # the step size of update number `step`
            logging_step = (state.step + 1) % log_every == 0
            stats = self.training_step(indices, bool(stop_request), with_terms=logging_step)
            state.batch_in_epoch += 1
            stop_run = self.nonfinite.after_step(state, stats.finite)
            if stats.finite:
                state.step += 1
                self.epoch_bound_sum += stats.bound
                state.epoch_bound_count += 1
                window.add(stats.bound, indices.numel())
                bar.update(1)
            else:
                self.on_nonfinite(stop_run)
            if window.steps and state.step % log_every == 0:
                step_size = self.parts.schedule.current()
                values = window.write(self.loggers, stats.terms, step_size, state.step)
                for name, value in stats.extras.items():  # kernel, jitter and the like
                    self.loggers.log_scalar(f"heads/{name}", float(value), state.step)
                bar.set_postfix(bound=f"{values['bound']:.2f}", refresh=False)
            if stats.finite and state.step % self.checkpoint_every == 0:
                self.save()
            if stats.stop or (self.finished_training() and state.batch_in_epoch < n_batches):
                return False, stats.stop  # stopped inside the epoch (a step budget ending on
                # its last batch still completes the epoch: validation, images, eval_at_epochs)
        state.epoch += 1
        state.batch_in_epoch = 0
        return True, False

    def end_of_epoch(self) -> None:
        """Validation, best.pt, test bound at chosen epochs, images; then the history record.

        A stop signal abandons this at once; the checkpoint then says it is pending, and the
        resumed run does it first (it draws no training noise, so resume stays exact).
        """
        cfg, parts, state, main = self.trainer_cfg, self.parts, self.state, self.context.is_main
        record = EpochRecord(epoch=state.epoch, step=state.step)
        self.fold_epoch_bound()
        if state.epoch_bound_count:
            record.train_bound = state.epoch_bound_sum / state.epoch_bound_count
            self.loggers.log_scalar("train/epoch_bound", record.train_bound, state.step)
        with interruptible(self.stop_request):
            if parts.data.valid is not None and cfg.valid_samples:
                record.valid_bound = validation_bound(
                    parts, self.trainer_cfg, self.eval_settings, self.context
                )
                self.loggers.log_scalar("valid/bound", record.valid_bound, state.step)
                if record.valid_bound > state.best_valid_bound:
                    self.save("best.pt")
                    state.best_valid_bound = record.valid_bound
                    state.best_epoch = state.epoch
            if cfg.diagnostics_examples and parts.data.valid is not None and main:
                statistics = head_statistics(parts, cfg.diagnostics_examples, self.eval_settings)
                for name, value in statistics.items():
                    self.loggers.log_scalar(f"heads/{name}", value, state.step)
                record.update(statistics)
            if state.epoch in cfg.eval_at_epochs:
                test = epoch_test(parts, self.eval_settings, self.context)
                state.eval_at_epochs[str(state.epoch)] = test.to_json()
                self.loggers.log_scalar("test/bound_nll", test.test_bound_nll, state.step)
            if cfg.image_every and state.epoch % cfg.image_every == 0 and main:
                self.save_images()
        state.history.append(record.to_json())
        state.epoch_bound_sum, state.epoch_bound_count = 0.0, 0
        state.epoch_end_pending = False
        bounds = ", ".join(
            f"{k} {v:.3f}" for k, v in record.to_json().items() if k.endswith("bound")
        )
        self.log.info("epoch %d (step %d): %s", state.epoch, state.step, bounds)
        self.loggers.flush()
        if record.valid_bound is not None and self.early_stopping.observe(
            state, record.valid_bound
        ):
            self.log.info(
                "early stopping after epoch %d: %d epochs without a gain of %g nats in the "
                "validation bound (best %.3f at epoch %d)",
                state.epoch, state.epochs_without_gain, self.early_stopping.min_delta,
                state.best_valid_bound, state.best_epoch,
            )  # fmt: skip

    def final_evaluation(self) -> None:
        """The test evaluation at the end (unless the one recorded is of this very step)."""
        step, path = self.state.step, self.folder.path
        trained = step > self.steps_at_start
        figures = self.trainer_cfg.image_every and not (path / "samples.png").exists()
        if trained and self.context.is_main and figures:
            self.save_images()  # a run stopped by max_steps inside its first epoch
        test = self.folder.record.test
        current = test is not None and (step if test.step is None else test.step) == step
        settings = self.eval_settings
        if settings.at_end and (trained or not current):
            tested = self.load_tested_parameters()
            self.log.info(
                "evaluating %s on %s, %d samples",
                tested["checkpoint"], settings.split, settings.is_samples,
            )  # fmt: skip
            journal = None
            if not self.context.enabled and os.access(path, os.W_OK):
                journal = evaluation_journal(self.parts, settings, path, self.log)
            trained = step * self.trainer_cfg.batch_size
            test = final_test(
                self.parts, self.trainer_cfg, settings, self.context, path, journal, trained
            )
            if test.aux_gap_skipped:
                self.log.info("%s", test.aux_gap_skipped)
            config = OmegaConf.to_container(self.cfg, resolve=True)
            assert isinstance(config, dict)
            self.loggers.log_test_result(config, test.to_json(), step)  # the estimates alone
            test.step = step  # the record adds which parameters were tested
            test.update(tested)
            self.folder.record.test = test
            if journal is not None:  # the result is in metrics.json before its journal goes
                self.write_metrics("running")
                journal.discard()

    def load_tested_parameters(self) -> dict[str, Any]:
        """Put the parameters the final test evaluates into the model and heads: best.pt's
        (eval.checkpoint, with early stopping by default) or the final ones. What was loaded."""
        best = self.folder.checkpoints / "best.pt"
        if self.test_checkpoint == "best" and best.is_file():
            checkpoint = load_checkpoint(best, map_location=self.parts.device)
            self.parts.model.load_state_dict(checkpoint["model"])
            self.parts.heads.load_state_dict(checkpoint["heads"])
            return {"checkpoint": "best.pt", "epoch": self.state.best_epoch}
        if self.test_checkpoint == "best":
            self.log.warning("no checkpoints/best.pt (no validation yet): testing the final step")
        return {"checkpoint": "final", "epoch": self.state.epoch}

    # -- the run's beginning and end ---------------------------------------------------------
    def start(self, plan: RunPlan) -> None:
        """Resume (or start); the run folder records what the run is and opens TensorBoard."""
        if plan.checkpoint is not None:
            self.state = restore_training(self.parts, plan.checkpoint)
            self.training_step.load_generator_states(plan.checkpoint["generators"])
        elif (source := load_initial_model(self.parts, self.cfg)) is not None:
            self.log.info("model p(x, z) starts from %s", source)
        self.prepare_objective()
        self.folder.describe(self.cfg, self.parts.data, plan, self.state.step)
        self.write_metrics("running")  # first: from here on the folder is the run's
        self.loggers = self.folder.begin(self.cfg, self.state.step)
        self.steps_at_start = self.state.step

    def finish(self) -> dict[str, Any]:
        """Record divergence, why training ended and the finished status; the metrics."""
        self.folder.record.stop_reason = self.stop_reason()
        self.folder.finish(self.parts.data.x_shape)
        self.write_metrics("finished")
        self.log.info("finished at step %d", self.state.step)
        return self.folder.record.to_json()

    def stop(self) -> dict[str, Any]:
        """Checkpoint after a stop signal, and say how to resume; the metrics (status
        `preempted` after SIGUSR2, submitit's signal, else `interrupted`)."""
        self.save()
        self.folder.record.stop_signal = self.stop_request.name
        self.write_metrics("preempted" if self.stop_request.preempted else "interrupted")
        self.folder.report_stop(self.stop_request.name)
        return self.folder.record.to_json()

    # -- bookkeeping -------------------------------------------------------------------------
    def prepare_objective(self) -> None:
        """Wrap model and heads for DDP and torch.compile as the config asks (after resume)."""
        self.training_step.prepare()

    @property
    def graphed_steps(self) -> bool:
        """Whether each step replays CUDA graphs (torch.compile's reduce-overhead mode)."""
        return self.training_step.graphed

    def on_nonfinite(self, stop_run: bool) -> None:
        """Log a skipped step (the policy counted it); stop the run when the policy says so."""
        step, cause = self.state.step, self.training_step.nonfinite_cause
        self.loggers.log_scalar("health/nonfinite_skipped", self.state.nonfinite_total, step)
        cause = f" ({cause})" if cause else ""
        self.log.warning("step %d skipped: non-finite bound or gradient%s", step, cause)
        if stop_run:
            raise self.nonfinite.error(step, f"{cause}; {self.folder.divergence_advice()}")

    def save_images(self) -> None:
        """samples, reconstructions (and the model's own figures), PNG and PDF; to the loggers."""
        parts, path = self.parts, self.folder.path
        generator = make_generator(parts.device, self.settings.seed + 7)
        grids, files = save_run_figures(parts.model, parts.heads, parts.data.test, path, generator)
        for name, grid in grids.items():
            self.loggers.log_image(name, grid, self.state.step)
        self.loggers.log_figures(files)

    def stop_reason(self) -> str:
        """Why training ended: early_stopping, max_steps or epochs."""
        if self.state.stop_reason == EARLY_STOPPING:
            return EARLY_STOPPING
        return "max_steps" if self.step_budget_spent() else "epochs"

    def step_budget_spent(self) -> bool:
        return self.max_steps is not None and self.state.step >= self.max_steps

    def finished_training(self) -> bool:
        if self.state.stop_reason == EARLY_STOPPING or self.step_budget_spent():
            return True
        return self.state.epoch >= self.epochs

    def steps_planned(self) -> int:
        cfg = self.trainer_cfg
        per_epoch = self.parts.data.train.batch_count(cfg.batch_size, cfg.drop_last)
        total = self.epochs * per_epoch
        return total if self.max_steps is None else min(total, self.max_steps)

    def fold_epoch_bound(self) -> None:
        """Move the on-device running sum into the saved state (a host sync, at saves only)."""
        self.state.epoch_bound_sum += float(self.epoch_bound_sum)
        self.epoch_bound_sum.zero_()

    def save(self, name: str = "last.pt") -> None:
        """Checkpoint (every rank takes part: the shard generators are gathered to rank 0)."""
        self.fold_epoch_bound()
        generator_states = self.training_step.generator_states()
        check_finite_parameters(
            self.parts.parameters,
            f"at step {self.state.step} (a non-finite gradient; set trainer.grad_clip or "
            f"trainer.check_gradients=true); {self.folder.divergence_advice()}",
        )
        if self.context.is_main:
            checkpoint = training_checkpoint(self.parts, generator_states, self.state, self.cfg)
            self.folder.save_checkpoint(checkpoint, name)

    def write_metrics(self, status: str, error: str | None = None) -> None:
        """metrics.json as far as the run got (rank 0)."""
        self.folder.record.record_progress(self.state, status, error, self.context.world_size)
        self.folder.write_record()
