"""hydra-submitit-launcher's SLURM launcher, waiting for every job of a sweep: a job SLURM
cancelled or killed comes back as a failed job naming its run folder and SLURM's state (the
plugin's own launcher stops waiting at the first such job, while the others run on)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from omegaconf import OmegaConf, open_dict

from vgp_bench.errors import UserError


class SlurmJobError(UserError):
    """A job SLURM ended without a result: cancelled, killed, out of memory or time."""


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """`hydra/launcher=slurm`: submitit's SLURM launcher, every job waited for."""

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        self.submitted: list[Any] = []
        executor_class = submitit_launcher_executor()
        original = executor_class.map_array

        def map_array(executor: Any, *args: Any, **kwargs: Any) -> list[Any]:
            self.submitted = original(executor, *args, **kwargs)
            return [JobWaiter(job) for job in self.submitted]

        executor_class.map_array = map_array  # the plugin's launch asks each job for its results
        try:
            waited = super().launch(job_overrides, initial_job_idx)
        finally:
            executor_class.map_array = original
        return [
            result if isinstance(result, JobReturn) else self.failed_job(result, overrides, num)
            for num, (result, overrides) in enumerate(zip(waited, job_overrides), initial_job_idx)
        ]

    def failed_job(self, error: Exception, overrides: Sequence[str], num: int) -> JobReturn:
        """The JobReturn of a job that ended without one, with its run folder."""
        failed = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
        failed.return_value = error
        with contextlib.suppress(Exception):  # without it, the summary names the SLURM job
            failed.hydra_cfg = self.job_hydra_config(overrides, num)
        return failed

    def job_hydra_config(self, overrides: Sequence[str], num: int) -> Any:
        """The job's hydra config with its run folder, as the job itself composes it."""
        assert self.hydra_context is not None and self.config is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config.hydra.job):
            config.hydra.job.num = num
        previous = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(config)  # for ${hydra:...} in hydra.sweep.subdir
        try:
            folder = os.path.join(str(config.hydra.sweep.dir), str(config.hydra.sweep.subdir))
        finally:
            if previous is not None:
                HydraConfig.instance().cfg = previous
        return OmegaConf.create({"hydra": {"runtime": {"output_dir": os.path.abspath(folder)}}})


def submitit_launcher_executor() -> Any:
    """The executor class the plugin's launch builds (submitit's AutoExecutor)."""
    import submitit

    return submitit.AutoExecutor


class JobWaiter:
    """A submitted job whose results() gives SlurmJobError instead of raising it."""

    def __init__(self, job: Any) -> None:
        self.job = job

    def results(self) -> list[Any]:
        try:
            return self.job.results()
        except Exception as error:  # submitit's UncompletedJobError and the like
            text = str(error).strip()
            first = text.splitlines()[0] if text else type(error).__name__
            return [SlurmJobError(
                f"SLURM job {self.job.job_id} ended {self.job.state}: {first} "
                f"(its log: {self.job.paths.stderr})"
            )]  # fmt: skip
