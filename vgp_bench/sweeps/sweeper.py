"""Sweeps that say how they ended: each job's outcome, and one line per job that did not finish
with a non-zero exit, whatever the launcher (basic, joblib, SLURM)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from vgp_bench.failures import USER_ERRORS, one_line_error


@dataclass(frozen=True)
class JobOutcome:
    """How one job of a sweep ended: its run folder, its status (finished, failed, interrupted,
    preempted, ...) and why it did not finish."""

    folder: str
    status: str
    why: str = ""

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def line(self) -> str:
        return f"{self.folder}: {self.status}: {self.why or 'not finished'}"


# what a run's status means for the sweep when its job gives no reason of its own
STATUS_ADVICE = {
    "interrupted": "stopped by a signal, checkpoint saved: run the sweep again to resume it",
    "preempted": "preempted (SIGUSR2), checkpoint saved: run the sweep again to resume it",
    "running": "its process is gone (killed?): run the sweep again to resume it",
}


def recorded_outcome(folder: str) -> JobOutcome | None:
    """The outcome metrics.json in `folder` records, or None without a readable one."""
    try:
        record = json.loads((Path(folder) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    status = str(record.get("status", "unknown"))
    why = " ".join(str(record.get("error") or STATUS_ADVICE.get(status, "")).split())
    return JobOutcome(folder, status, why)


def job_folder(job: JobReturn) -> str:
    """The run folder of a job (Hydra's output_dir), or '?' when the job never got one."""
    hydra_cfg = job.hydra_cfg
    output_dir = OmegaConf.select(hydra_cfg, "hydra.runtime.output_dir") if hydra_cfg else None
    return str(output_dir or job.working_dir or "?")


def outcome_of(job: JobReturn) -> JobOutcome:
    """A job's outcome: what its task returned, else what its folder records and its error."""
    value = job._return_value  # the property raises for a failed job
    if job.status == JobStatus.COMPLETED and isinstance(value, JobOutcome):
        return value
    folder = job_folder(job)
    recorded = recorded_outcome(folder)
    if job.status == JobStatus.COMPLETED:
        return recorded or JobOutcome(folder, "unknown", "the job ended without metrics.json")
    error = str(value)
    if isinstance(value, BaseException):  # the project's errors are their message
        error = one_line_error(value, expected=isinstance(value, USER_ERRORS))
    if recorded is not None and not recorded.finished:  # `running`: its process was killed
        status = "stopped" if recorded.status == "running" else recorded.status
        return JobOutcome(folder, status, error)
    return JobOutcome(folder, "failed", error)


def summary_lines(outcomes: Sequence[JobOutcome], command: str) -> list[str]:
    """One line per job that did not finish, after a header; none when every job finished."""
    unfinished = [outcome for outcome in outcomes if not outcome.finished]
    if not unfinished:
        return []
    header = f"{command}: {len(unfinished)} of {len(outcomes)} jobs did not finish:"
    return [header, *(f"  {outcome.line()}" for outcome in unfinished)]


class ReportingSweeper(Sweeper):
    """Hydra's basic sweeper (its `max_batch_size`, `params`) that runs every job, then prints a
    line per job that did not finish and exits with status 1: Hydra's own stops at the first
    failed job with a traceback, and counts a job whose task caught its error as done."""

    def __init__(self, max_batch_size: int | None = None, params: Any = None) -> None:
        self.max_batch_size = max_batch_size
        self.params = dict(params or {})
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Launcher | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def job_batches(self, arguments: list[str]) -> list[list[list[str]]]:
        """The jobs' overrides in batches, as Hydra's basic sweeper makes them."""
        # imported here: Hydra's plugin scan re-executes its core plugins' modules in place
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        params = [f"{key}={value}" for key, value in self.params.items()] + list(arguments)
        return BasicSweeper.split_arguments(parser.parse_overrides(params), self.max_batch_size)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns: list[Sequence[JobReturn]] = []
        outcomes: list[JobOutcome] = []
        first = 0
        for batch in self.job_batches(arguments):
            self.validate_batch_is_legal(batch)
            try:
                results = self.launcher.launch(batch, initial_job_idx=first)
            except Exception as error:  # the launcher gave up on the batch
                why = one_line_error(error)
                outcomes += [
                    JobOutcome(f"job #{first + i}", "failed", why) for i in range(len(batch))
                ]
            else:
                outcomes += [outcome_of(result) for result in results]
                returns.append(results)
            first += len(batch)
        lines = summary_lines(outcomes, str(self.config.hydra.help.app_name))
        if lines:
            print("\n".join(lines), file=sys.stderr)
            sys.exit(1)
        return returns
