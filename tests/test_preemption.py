"""The cluster path's logic without a cluster: SIGUSR2 stops a run like SIGTERM and hands the
job to submitit, a sweep sums up its unfinished jobs, threads follow the allocation, and a
SLURM step's tasks find their rendezvous (tests/test_slurm.py runs all of it on SLURM)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from tests.helpers import TINY, compose_config
from tests.test_train import assert_same_parameters
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.loop.step import TrainingStep
from vgp_bench.run.process import runtime
from vgp_bench.run.process.distributed import first_host, slurm_rendezvous
from vgp_bench.run.process.preemption import NotRequeuedError, hand_over_preemption
from vgp_bench.sweeps.sweeper import JobOutcome, outcome_of, summary_lines

# ---------------------------------------------------------------- SIGUSR2


def usr2_at_step(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Send SIGUSR2 to this process during training step number `step` (from 0)."""
    real = TrainingStep.__call__
    calls = {"count": 0}

    def call(self, *args, **kwargs):
        if calls["count"] == step:
            os.kill(os.getpid(), signal.SIGUSR2)
        calls["count"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TrainingStep, "__call__", call)


def test_usr2_checkpoints_says_preempted_and_the_resume_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = [*TINY, "eval.at_end=false", "trainer.image_every=0", "trainer.checkpoint_every=100"]
    usr2_at_step(monkeypatch, 2)
    stopped = train(compose_config(common), tmp_path / "stopped")
    assert stopped["status"] == "preempted"
    checkpoint = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    # signalled inside the third step, read by the fourth: it finishes, then the checkpoint
    assert checkpoint["state"]["step"] == 4
    assert "SIGUSR2: checkpoint saved" in (tmp_path / "stopped" / "train.log").read_text()
    monkeypatch.undo()
    assert train(compose_config(common), tmp_path / "stopped")["status"] == "finished"
    train(compose_config(common), tmp_path / "straight")
    assert_same_parameters(tmp_path / "stopped", tmp_path / "straight")


def test_the_handover_calls_submitits_handler_and_says_when_it_will_not_requeue() -> None:
    calls = []
    previous = signal.getsignal(signal.SIGUSR2)
    try:
        signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
        hand_over_preemption()  # a handler that returns: a rank other than 0
        assert calls == [signal.SIGUSR2]

        def not_requeued(signum, frame):
            raise RuntimeError("Job not requeued because: timed-out too many times.")

        signal.signal(signal.SIGUSR2, not_requeued)
        with pytest.raises(NotRequeuedError, match=r"too many times\. The checkpoint is saved"):
            hand_over_preemption()
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)  # no submitit: stop as a signal would
        with pytest.raises(SystemExit) as stopped:
            hand_over_preemption()
        assert stopped.value.code == 128 + signal.SIGUSR2
    finally:
        signal.signal(signal.SIGUSR2, previous)


# ---------------------------------------------------------------- a sweep's summary


def job_return(status: JobStatus, value: object, folder: Path | None) -> JobReturn:
    job = JobReturn(status=status)
    job.return_value = value
    if folder is not None:
        job.hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
    return job


def test_outcomes_come_from_the_task_else_from_the_run_folder(tmp_path: Path) -> None:
    returned = JobOutcome(str(tmp_path / "a"), "failed", "bad setting")
    assert outcome_of(job_return(JobStatus.COMPLETED, returned, None)) == returned
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "metrics.json").write_text(json.dumps({"status": "running", "steps": 5}))
    killed = job_return(
        JobStatus.FAILED, RuntimeError("SLURM job 7_1 ended CANCELLED"), tmp_path / "b"
    )
    assert outcome_of(killed) == JobOutcome(
        str(tmp_path / "b"), "stopped", "RuntimeError: SLURM job 7_1 ended CANCELLED"
    )
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "metrics.json").write_text(json.dumps({"status": "preempted"}))
    preempted = outcome_of(job_return(JobStatus.COMPLETED, None, tmp_path / "c"))
    assert preempted.status == "preempted" and "run the sweep again" in preempted.why
    never = outcome_of(job_return(JobStatus.FAILED, ValueError("no folder"), None))
    assert never == JobOutcome("?", "failed", "ValueError: no folder")


def test_the_summary_is_a_line_per_unfinished_job() -> None:
    outcomes = [
        JobOutcome("multirun/0", "finished"),
        JobOutcome("multirun/1", "failed", "the bound was NaN"),
        JobOutcome("multirun/2", "preempted", ""),
    ]
    assert summary_lines(outcomes, "vgp-train") == [
        "vgp-train: 2 of 3 jobs did not finish:",
        "  multirun/1: failed: the bound was NaN",
        "  multirun/2: preempted: not finished",
    ]
    assert summary_lines(outcomes[:1], "vgp-train") == []


# ---------------------------------------------------------------- threads and rendezvous


def test_threads_default_to_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert runtime.allocated_threads({"SLURM_CPUS_PER_TASK": "2"}) == (
        2, "SLURM_CPUS_PER_TASK=2"
    )  # fmt: skip
    assert runtime.allocated_threads({}) == (3, "the process's CPU affinity")
    assert runtime.allocated_threads({"OMP_NUM_THREADS": "1", "SLURM_CPUS_PER_TASK": "2"}) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert runtime.allocated_threads({}) is None  # the whole machine: torch's default
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    before = torch.get_num_threads()
    try:
        assert runtime.apply_threads(None) == (
            "1 CPU threads (the allocation: SLURM_CPUS_PER_TASK=1)"
        )
        assert torch.get_num_threads() == 1
        assert runtime.apply_threads(2).startswith("2 CPU threads (threads=2)")
    finally:
        torch.set_num_threads(before)


def test_a_slurm_step_of_several_tasks_gives_torchruns_variables() -> None:
    step = {
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NODELIST": "node[03-05,7],gpu1",
        "SLURM_JOB_ID": "123456",
    }
    assert slurm_rendezvous(step) == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "node03",
        "MASTER_PORT": str(20000 + 123456 % 20000),
    }
    assert slurm_rendezvous({**step, "SLURM_STEP_NUM_TASKS": "1"}) == {}  # one task
    assert slurm_rendezvous({**step, "RANK": "0"}) == {}  # torchrun's own
    assert slurm_rendezvous({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}) == {}  # a batch script
    assert [first_host(nodes) for nodes in ("vm", "a1,b[2-3]", "n[1,3]")] == ["vm", "a1", "n1"]


def test_the_report_shows_a_preempted_run_as_resumable(tmp_path: Path, capsys) -> None:
    from vgp_bench.analysis import report

    run = tmp_path / "runs" / "0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"")
    (run / "metrics.json").write_text(json.dumps({"status": "preempted", "steps": 40}))
    assert report.main([str(tmp_path / "runs")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "preempted" in line)
    assert "preempted, resumable" in row and "resumes it from checkpoints/last.pt" in row


def test_vgp_trains_own_test_is_labelled_end_of_training(tmp_path: Path, capsys) -> None:
    from vgp_bench.analysis import report

    train(compose_config([*TINY, "trainer.image_every=0"]), tmp_path / "runs" / "0")
    assert report.main([str(tmp_path / "runs")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "| DLGM" in line)
    assert row.rstrip(" |").endswith("end of training") and "vgp-eval" not in row, row
