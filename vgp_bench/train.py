"""`vgp-train`: fit a model with a variational family, checkpoint, evaluate, record metrics."""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from vgp_bench.checkpoint import load_checkpoint, save_checkpoint, write_json
from vgp_bench.data.base import CorruptDataError, DatasetBundle, MissingDataError
from vgp_bench.evaluate import estimate_split, format_summary, save_per_example
from vgp_bench.images import reconstruction_pairs, save_grid
from vgp_bench.inference.base import build_heads
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.runtime import (
    ConfigError,
    build,
    code_version,
    config_name,
    make_generator,
    resolve_device,
)

# Keys that may change between an interrupted run and its resumption.
RESUMABLE_CHANGES = ("trainer", "eval", "device", "data_dir")
USER_ERRORS = (ConfigError, MissingDataError, CorruptDataError, FileNotFoundError, ValueError)


class NonFiniteTrainingError(RuntimeError):
    """Too many non-finite bounds in a row."""


@dataclass
class Components:
    """Everything a run is built from its config."""

    data: DatasetBundle
    model: LatentVariableModel
    heads: nn.ModuleDict
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
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
    epoch_bound_sum: float = 0.0  # sum of training bounds over this epoch's finite steps
    epoch_bound_count: int = 0


def load_data(cfg: DictConfig) -> DatasetBundle:
    """Build the dataset of `cfg.dataset` with the absolute data folder."""
    data_dir = str(Path(cfg.data_dir).expanduser().resolve())
    return build(cfg.dataset, data_dir=data_dir)


def build_components(cfg: DictConfig, data: DatasetBundle | None = None) -> Components:
    """Dataset, model, heads, optimizer and schedule from the config (parameters seeded)."""
    device = resolve_device(str(cfg.device))
    data = load_data(cfg) if data is None else data
    torch.manual_seed(int(cfg.seed))  # parameter initialisation
    model = build(cfg.model, x_shape=data.x_shape).to(device)
    heads = build_heads(build(cfg.inference), model.sites).to(device)
    parameters = [*model.parameters(), *heads.parameters()]
    optimizer = build(cfg.optim.optimizer, params=parameters)
    scheduler = LambdaLR(optimizer, build(cfg.optim.schedule))
    return Components(data.to(device), model, heads, optimizer, scheduler, device)


def state_dicts(parts: Components, state: RunState, generator: torch.Generator) -> dict[str, Any]:
    return {
        "model": parts.model.state_dict(),
        "heads": parts.heads.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict(),
        "generator": generator.get_state(),
        "state": asdict(state),
    }


def restore(parts: Components, checkpoint: dict[str, Any], generator: torch.Generator) -> RunState:
    parts.model.load_state_dict(checkpoint["model"])
    parts.heads.load_state_dict(checkpoint["heads"])
    parts.optimizer.load_state_dict(checkpoint["optimizer"])
    parts.scheduler.load_state_dict(checkpoint["scheduler"])
    generator.set_state(checkpoint["generator"])
    return RunState(**checkpoint["state"])


def check_same_run(saved: dict[str, Any], current: dict[str, Any], run_dir: Path) -> None:
    """Refuse to resume a run folder whose run was made with another model/data/inference."""
    for key in sorted(set(saved) | set(current)):
        if key in RESUMABLE_CHANGES or key == "experiment_name":
            continue
        if saved.get(key) != current.get(key):
            raise ConfigError(
                f"{run_dir} holds a run with a different '{key}' config; resume it with the "
                "same settings, choose another hydra.run.dir, or pass trainer.resume=false"
            )


def describe_run(cfg: DictConfig, data: DatasetBundle) -> dict[str, Any]:
    """The provenance every metrics.json records (DESIGN.md section 5)."""
    inference = cfg.inference
    return {
        "experiment": cfg.get("experiment_name"),
        "model": config_name(cfg.model),
        "inference": config_name(inference),
        "objective": inference.get("objective"),
        "aux_samples": inference.get("aux_samples", 0),
        "seed": int(cfg.seed),
        "code_version": code_version(),
        "dataset": {**data.info, "split_sizes": data.split_sizes()},
        "optimizer": config_name(cfg.optim),
        "batch_size": int(cfg.trainer.batch_size),
        "train_samples": int(cfg.trainer.n_samples),
    }


@contextmanager
def stop_signals() -> Iterator[dict[str, int]]:
    """Turn SIGINT/SIGTERM into a request to checkpoint and stop after the current step."""
    request: dict[str, int] = {}
    previous = {}

    def handler(signum: int, _frame: Any) -> None:
        request["signal"] = signum

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


class Trainer:
    """The training loop over Traces: it knows neither the model's nor the heads' internals."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path, parts: Components) -> None:
        self.cfg = cfg
        self.trainer_cfg = cfg.trainer
        self.run_dir = Path(run_dir)
        self.parts = parts
        self.generator = make_generator(parts.device, int(cfg.seed))
        self.state = RunState()
        self.checkpoint_dir = self.run_dir / "checkpoints"
        self.metrics: dict[str, Any] = {}
        self.writer: SummaryWriter | None = None
        self.epoch_bound_sum = torch.zeros((), device=parts.device)  # folded into state on save

    # -- bookkeeping -------------------------------------------------------------------------
    def save(self, name: str = "last.pt") -> None:
        self.fold_epoch_bound()
        checkpoint = state_dicts(self.parts, self.state, self.generator)
        checkpoint["config"] = OmegaConf.to_container(self.cfg, resolve=True)
        save_checkpoint(checkpoint, self.checkpoint_dir / name)

    def fold_epoch_bound(self) -> None:
        """Move the on-device running sum into the saved state (a host sync, at saves only)."""
        self.state.epoch_bound_sum += float(self.epoch_bound_sum)
        self.epoch_bound_sum.zero_()

    def write_metrics(self, status: str, error: str | None = None) -> None:
        self.metrics.update(
            status=status,
            error=error,
            epochs_completed=self.state.epoch,
            steps=self.state.step,
            wall_time_s=round(self.state.wall_time_s, 3),
            history=self.state.history,
            eval_at_epochs=self.state.eval_at_epochs,
            nonfinite_skipped=self.state.nonfinite_total,
        )
        write_json(self.metrics, self.run_dir / "metrics.json")

    def resume_if_possible(self) -> bool:
        path = self.checkpoint_dir / "last.pt"
        if not (self.trainer_cfg.resume and path.exists()):
            return False
        checkpoint = load_checkpoint(path, map_location=self.parts.device)
        current = OmegaConf.to_container(self.cfg, resolve=True)
        assert isinstance(current, dict)
        check_same_run(checkpoint["config"], current, self.run_dir)
        self.state = restore(self.parts, checkpoint, self.generator)
        return True

    # -- the loop ----------------------------------------------------------------------------
    def finished_training(self) -> bool:
        max_steps = self.trainer_cfg.max_steps
        if max_steps is not None and self.state.step >= int(max_steps):
            return True
        return self.state.epoch >= int(self.trainer_cfg.epochs)

    def training_step(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
        parts = self.parts
        trace = parts.model(x, parts.heads, int(self.trainer_cfg.n_samples), self.generator)
        bound = trace.log_weights.mean()
        parts.optimizer.zero_grad(set_to_none=True)
        (-bound).backward()
        clip = self.trainer_cfg.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_(
            parts.parameters, float(clip) if clip else math.inf
        )
        finite = bool(torch.isfinite(bound) & torch.isfinite(grad_norm))  # the one sync a step
        if finite:
            parts.optimizer.step()
            parts.scheduler.step()
        terms = {name: value.detach().mean() for name, value in trace.terms.items()}
        terms["grad_norm"] = grad_norm.detach()
        return bound.detach(), terms, finite

    def log_scalars(
        self, sums: dict[str, torch.Tensor], count: int, examples_per_s: float
    ) -> dict[str, float]:
        values = {name: float(total) / count for name, total in sums.items()}
        values["lr"] = self.parts.scheduler.get_last_lr()[0]
        values["examples_per_s"] = examples_per_s
        for name, value in values.items():
            prefix = (
                "train" if name in ("bound", "lr", "grad_norm", "examples_per_s") else "train_terms"
            )
            self.writer.add_scalar(f"{prefix}/{name}", value, self.state.step)  # type: ignore[union-attr]
        return values

    def log_head_extras(self) -> None:
        """Kernel hyperparameters, jitter and similar diagnostics the heads expose."""
        for site, head in self.parts.heads.items():
            extras = getattr(head, "last_extras", None)
            for name, value in (extras or {}).items():
                self.writer.add_scalar(f"heads/{site}/{name}", float(value), self.state.step)  # type: ignore[union-attr]

    def run_epoch(self, stop_request: dict[str, int], bar: tqdm) -> bool:
        """Train until the epoch ends; False when stopped early (signal or max_steps)."""
        cfg = self.trainer_cfg
        train_split = self.parts.data.train
        order = train_split.epoch_order(self.state.epoch, int(self.cfg.seed))
        batches = train_split.batches(
            int(cfg.batch_size),
            order,
            start=self.state.batch_in_epoch,
            generator=self.generator,
            drop_last=bool(cfg.drop_last),
        )
        log_every = int(cfg.log_every)
        sums: dict[str, torch.Tensor] = {}
        count, window_start, window_examples = 0, time.perf_counter(), 0
        for x in batches:
            bound, terms, finite = self.training_step(x)
            self.state.batch_in_epoch += 1
            if finite:
                self.state.step += 1
                self.state.nonfinite_in_row = 0
                self.epoch_bound_sum += bound
                self.state.epoch_bound_count += 1
                for name, value in {"bound": bound, **terms}.items():
                    sums[name] = sums.get(name, 0.0) + value
                count += 1
                window_examples += x.shape[0]
                bar.update(1)
            else:
                self.on_nonfinite()
            if count and self.state.step % log_every == 0:
                elapsed = time.perf_counter() - window_start
                values = self.log_scalars(sums, count, window_examples / max(elapsed, 1e-9))
                self.log_head_extras()
                bar.set_postfix(bound=f"{values['bound']:.2f}", refresh=False)
                sums, count, window_start, window_examples = {}, 0, time.perf_counter(), 0
            if self.state.step and self.state.step % int(cfg.checkpoint_every) == 0 and finite:
                self.save()
            if stop_request or self.finished_training():
                return False
        self.state.epoch += 1
        self.state.batch_in_epoch = 0
        return True

    def on_nonfinite(self) -> None:
        self.state.nonfinite_in_row += 1
        self.state.nonfinite_total += 1
        if self.writer is not None:
            self.writer.add_scalar(
                "health/nonfinite_skipped", self.state.nonfinite_total, self.state.step
            )
        limit = int(self.trainer_cfg.max_nonfinite)
        if self.state.nonfinite_in_row >= limit:
            raise NonFiniteTrainingError(
                f"the bound or its gradient was NaN/Inf for {limit} steps in a row (step "
                f"{self.state.step}); the last good checkpoint is "
                f"{self.checkpoint_dir / 'last.pt'}; "
                "lower optim.optimizer.lr or set trainer.grad_clip"
            )

    def end_of_epoch(self) -> None:
        cfg, parts, epoch = self.trainer_cfg, self.parts, self.state.epoch
        record: dict[str, Any] = {"epoch": epoch, "step": self.state.step}
        self.fold_epoch_bound()
        if self.state.epoch_bound_count:
            record["train_bound"] = self.state.epoch_bound_sum / self.state.epoch_bound_count
            self.writer.add_scalar("train/epoch_bound", record["train_bound"], self.state.step)  # type: ignore[union-attr]
        self.state.epoch_bound_sum, self.state.epoch_bound_count = 0.0, 0
        if parts.data.valid is not None and cfg.valid_samples:
            valid = parts.data.valid
            if cfg.valid_subset:
                valid = valid.subset(int(cfg.valid_subset))
            estimate = estimate_split(
                parts.model,
                parts.heads,
                valid,
                int(cfg.valid_samples),
                int(self.cfg.eval.chunk_size),
                int(self.cfg.eval.batch_size),
                make_generator(parts.device, int(self.cfg.eval.seed) + epoch),
                parts.device,
            )
            record["valid_bound"] = float(estimate.bound.mean())
            self.writer.add_scalar("valid/bound", record["valid_bound"], self.state.step)  # type: ignore[union-attr]
            if record["valid_bound"] > self.state.best_valid_bound:
                self.state.best_valid_bound = record["valid_bound"]
                self.save("best.pt")
        if epoch in [int(e) for e in cfg.eval_at_epochs]:
            summary = self.evaluate_test(int(self.cfg.eval.epoch_is_samples))
            self.state.eval_at_epochs[str(epoch)] = {
                "test_bound_nll": summary["bound_nll"],
                "test_bound_nll_stderr": summary["bound_nll_stderr"],
                "test_nll": summary["nll"],
                "is_samples": summary["is_samples"],
                "n_examples": summary["n_examples"],
            }
            self.writer.add_scalar("test/bound_nll", summary["bound_nll"], self.state.step)  # type: ignore[union-attr]
        self.state.history.append(record)
        if cfg.image_every and epoch % int(cfg.image_every) == 0:
            self.save_images()

    @torch.no_grad()
    def save_images(self, count: int = 64) -> None:
        parts = self.parts
        parts.model.eval()
        parts.heads.eval()
        image_generator = make_generator(parts.device, int(self.cfg.seed) + 7)
        samples = parts.model.sample(count, image_generator)
        grid = save_grid(samples, self.run_dir / "samples.png")
        self.writer.add_image("samples", grid, self.state.step)  # type: ignore[union-attr]
        test = parts.data.test
        originals = test.gather(torch.arange(min(32, len(test))), image_generator)
        reconstructions = parts.model.reconstruct(originals, parts.heads, image_generator)
        grid = save_grid(
            reconstruction_pairs(originals, reconstructions),
            self.run_dir / "reconstructions.png",
            columns=16,
        )
        self.writer.add_image("reconstructions", grid, self.state.step)  # type: ignore[union-attr]
        for name, images in parts.model.extra_figures(8, image_generator).items():
            columns = max(1, images.shape[0] // 8)
            save_grid(images, self.run_dir / f"{name}.png", columns=columns)
        parts.model.train()
        parts.heads.train()

    def evaluate_test(self, is_samples: int, progress: bool = False) -> dict[str, Any]:
        return evaluate_components(self.parts, self.cfg.eval, is_samples, progress, self.run_dir)

    def fit(self) -> dict[str, Any]:
        """Train (resuming when the run folder holds a checkpoint), then evaluate on test."""
        with stop_signals() as stop_request:
            return self._fit(stop_request)

    def _fit(self, stop_request: dict[str, int]) -> dict[str, Any]:
        cfg = self.trainer_cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        resumed = self.resume_if_possible()
        OmegaConf.save(self.cfg, self.run_dir / "config.yaml", resolve=True)
        self.metrics = describe_run(self.cfg, self.parts.data)
        previous = self.run_dir / "metrics.json"
        if resumed and previous.exists():
            self.metrics = {**json.loads(previous.read_text()), **self.metrics}
        self.writer = SummaryWriter(str(self.run_dir / "tensorboard"))
        steps_per_epoch = (
            len(self.parts.data.train) // int(cfg.batch_size)
            if cfg.drop_last
            else -(-len(self.parts.data.train) // int(cfg.batch_size))
        )
        total_steps = int(cfg.epochs) * steps_per_epoch
        if cfg.max_steps is not None:
            total_steps = min(total_steps, int(cfg.max_steps))
        self.write_metrics("running")
        steps_before = self.state.step
        try:
            with tqdm(
                total=total_steps,
                initial=self.state.step,
                desc="train",
                unit="step",
                disable=not cfg.progress,
                dynamic_ncols=True,
            ) as bar:
                while not self.finished_training():
                    started = time.perf_counter()
                    completed = self.run_epoch(stop_request, bar)
                    self.state.wall_time_s += time.perf_counter() - started
                    if stop_request:
                        self.save()
                        self.write_metrics("interrupted")
                        signal_name = signal.Signals(stop_request["signal"]).name
                        print(
                            f"vgp-train: {signal_name}: checkpoint saved in {self.checkpoint_dir}; "
                            "run the same command again to resume",
                            file=sys.stderr,
                        )
                        return self.metrics
                    if completed:
                        self.end_of_epoch()
                    self.save()
                    self.write_metrics("running")
            trained = self.state.step > steps_before
            if self.cfg.eval.at_end and (trained or "test" not in self.metrics):
                self.metrics["test"] = self.evaluate_test(
                    int(self.cfg.eval.is_samples), progress=bool(cfg.progress)
                )
            self.write_metrics("finished")
        except NonFiniteTrainingError as error:
            self.write_metrics("failed", str(error))
            raise
        finally:
            self.writer.close()
        return self.metrics


def evaluate_components(
    parts: Components, eval_cfg: DictConfig, is_samples: int, progress: bool, run_dir: Path | None
) -> dict[str, Any]:
    """IS log-likelihood and bound on the evaluation split; per-example file when asked."""
    split = getattr(parts.data, str(eval_cfg.split))
    if split is None:
        raise ConfigError(f"eval.split={eval_cfg.split} does not exist for this dataset")
    if eval_cfg.subset:
        split = split.subset(int(eval_cfg.subset))
    estimate = estimate_split(
        parts.model,
        parts.heads,
        split,
        is_samples,
        int(eval_cfg.chunk_size),
        int(eval_cfg.batch_size),
        make_generator(parts.device, int(eval_cfg.seed)),
        parts.device,
        progress=progress,
        description=f"IS x{is_samples}",
    )
    summary = estimate.summary()
    summary["split"] = str(eval_cfg.split)
    if eval_cfg.save_per_example and run_dir is not None:
        path = run_dir / f"{eval_cfg.split}_per_example_k{is_samples}.h5"
        save_per_example(estimate, path)
        summary["per_example_file"] = path.name
    return summary


def train(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train and evaluate one run in `run_dir`; returns the metrics also written to metrics.json."""
    parts = build_components(cfg)
    return Trainer(cfg, run_dir, parts).fit()


def evaluate_checkpoint(
    checkpoint_path: str,
    eval_cfg: DictConfig,
    device_name: str = "auto",
    data_dir: str | None = None,
) -> dict[str, Any]:
    """Rebuild a run from its checkpoint, evaluate it and merge the result into its metrics.json."""
    path = Path(checkpoint_path)
    checkpoint = load_checkpoint(path)
    cfg = OmegaConf.create(checkpoint["config"])
    cfg.device = device_name
    if data_dir is not None:
        cfg.data_dir = data_dir
    cfg.eval = OmegaConf.merge(cfg.eval, eval_cfg)
    parts = build_components(cfg)
    parts.model.load_state_dict(checkpoint["model"])
    parts.heads.load_state_dict(checkpoint["heads"])
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    summary = evaluate_components(parts, cfg.eval, int(cfg.eval.is_samples), True, run_dir)
    summary["checkpoint"] = path.name
    metrics_path = run_dir / "metrics.json"
    if metrics_path.exists():
        metrics = json.loads(metrics_path.read_text())
        metrics["test"] = summary
        write_json(metrics, metrics_path)
    return summary


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    try:
        metrics = train(cfg, run_dir)
    except (*USER_ERRORS, NonFiniteTrainingError) as error:
        print(f"vgp-train: error: {error}", file=sys.stderr)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            return  # the run folder records the failure; the sweep goes on
        sys.exit(1)
    if metrics.get("status") == "interrupted":
        sys.exit(130)
    if "test" in metrics:
        print(
            f"\n{metrics['model']} + {metrics['inference']} on {metrics['dataset']['name']} "
            f"({run_dir})"
        )
        print(format_summary(metrics["test"]))


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
