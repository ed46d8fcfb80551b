"""`vgp-train`: fit a model with a variational family, checkpoint, evaluate, record metrics."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.vgp_bench_plugins import register_plugins
from vgp_bench.failures import USER_ERRORS, one_line_error, print_error
from vgp_bench.run.config.command_line import refuse_bad_command_line
from vgp_bench.run.config.settings import check_compile_device, check_train_settings
from vgp_bench.run.config.store import CONFIG_DIR
from vgp_bench.run.config.typed import trainer_settings
from vgp_bench.run.folder.checkpoint import (
    initial_model,
)
from vgp_bench.run.folder.metrics import RunRecord
from vgp_bench.run.folder.run_folder import agreed_plan
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.evaluate import format_summary
from vgp_bench.run.loop.trainer import Trainer
from vgp_bench.run.process.distributed import (
    adopt_slurm_rendezvous,
    init_distributed,
    shutdown_distributed,
)
from vgp_bench.run.process.host_memory import keep_freed_memory
from vgp_bench.run.process.preemption import hand_over_preemption
from vgp_bench.run.process.runtime import apply_threads
from vgp_bench.run.process.signals import exit_status, run_command
from vgp_bench.sweeps.sweeper import JobOutcome


def train(
    cfg: DictConfig,
    run_dir: str | Path,
    hydra_files: dict[str, Any] | None = None,
    settings_checked: bool = False,
) -> dict[str, Any]:
    """Train and evaluate one run in `run_dir`; returns the metrics also written to metrics.json.

    Every setting is checked (here, unless `settings_checked`: vgp-train's pre-start callback
    checked them in this process), and the folder found fit for this run (see `plan_run`),
    before anything is loaded or written. Under torchrun every rank calls this; rank 0's run
    folder is used by all.
    """
    if not settings_checked:
        check_train_settings(cfg)
        check_compile_device(cfg)
    apply_threads(cfg.get("threads"))
    context = init_distributed(cfg.trainer.get("ddp_backend"))
    try:
        run_dir = Path(context.broadcast_object(str(run_dir)))
        total_shards = context.world_size * trainer_settings(cfg).micro_batches
        plan = agreed_plan(context, cfg, run_dir, total_shards, False)  # refuse before loading
        if plan.checkpoint is None:
            initial_model(cfg)  # a missing or unfit trainer.init_model is a bad setting too
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


register_plugins()  # the sweeper and SLURM launcher configs/ name


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def _hydra_main(cfg: DictConfig) -> JobOutcome:
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    adopt_slurm_rendezvous()  # the tasks of a SLURM job step are ranks, as under torchrun
    try:
        memory = keep_freed_memory()
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"vgp-train: {apply_threads(cfg.get('threads'))}, {memory}, run folder {run_dir}")
        # a single run's settings were checked by the pre-start callback (prestart.PreStart);
        # a sweep's jobs are checked here, each once
        checked = hydra_cfg.mode == RunMode.RUN
        metrics = train(cfg, run_dir, hydra_files(cfg), settings_checked=checked)
    except Exception as error:  # user errors and crashes alike: one line, the rest in the log
        expected = isinstance(error, USER_ERRORS)
        print_error("vgp-train", error, expected=expected)
        if hydra_cfg.mode == RunMode.MULTIRUN:  # the sweep goes on; its summary names this job
            return JobOutcome(str(run_dir), "failed", one_line_error(error, expected))
        sys.exit(1)
    record = RunRecord(metrics)
    if record.status == "preempted":
        hand_over_preemption()  # submitit requeues the job, which resumes from the checkpoint
    if record.status == "interrupted":
        sys.exit(exit_status(record.stop_signal or "SIGINT"))
    if int(os.environ.get("RANK", "0")) != 0:  # once under torchrun
        return JobOutcome(str(run_dir), str(record.status), "")
    if record.test is not None:
        dataset = record.dataset
        name = None if dataset is None else dataset.name
        print(f"\n{record.model} + {record.inference} on {name} ({run_dir})")
        print(format_summary(record.test))
    print(f"vgp-train: {outcome(record)}", file=sys.stderr)
    return JobOutcome(str(run_dir), str(record.status), "")


def outcome(record: RunRecord) -> str:
    """What the run's recorded status means, in a line for the console (train.log and
    metrics.json hold the same)."""
    line = f"{record.status} after {record.steps} steps ({record.stop_reason or 'no stop reason'})"
    if record.diverged:
        return (
            f"{line}, marked diverged in metrics.json: {record.diverged_reason}; vgp-report "
            "lists it apart from the tables (--include-diverged puts it in)"
        )
    return f"{line}; recorded in metrics.json"


def main() -> None:
    refuse_bad_command_line("vgp-train", sys.argv[1:])
    run_command("vgp-train", _hydra_main)


if __name__ == "__main__":
    main()
