"""The cluster path on a real SLURM cluster (`make test-slurm` starts a one-node one with
scripts/slurm_cluster.sh): sweeps through `hydra/launcher=slurm` reach the report, a preempted
or timed-out job resumes exactly, unfinished jobs are summed up, and two tasks of one job run
the DDP path. Marked `slurm`, outside `make test`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO
from tests.test_distributed import COMMON as DDP_COMMON
from tests.test_multirun import TINY
from tests.test_train import assert_same_parameters
from vgp_bench.analysis import report
from vgp_bench.run.folder.checkpoint import load_checkpoint

pytestmark = pytest.mark.slurm

# one CPU, 1 GB and no GPU per job; 60 minutes is far from a timeout for submitit (it counts a
# SIGUSR2 before 80% of the time as a preemption)
LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=null",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=60",
]
# a run of 600 tiny steps (40 an epoch; about 45 s on 2 busy cores): long enough to be signalled
# while it trains (no test-set pass)
STEPS = 600
LONG = [
    *[override for override in TINY if not override.startswith("trainer.max_steps")],
    "dataset.n_train=640",
    "trainer.epochs=15",
    f"trainer.max_steps={STEPS}",
    "trainer.checkpoint_every=100000",
    "eval.at_end=false",
]


@pytest.fixture(scope="module", autouse=True)
def cluster() -> None:
    """A SLURM cluster answers (SLURM_CONF names it), else every test here fails at once."""
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.fail(f"no SLURM cluster ({error}); `make test-slurm` starts one")
    if ping.returncode != 0 or "UP" not in ping.stdout:
        pytest.fail(f"no SLURM cluster: {ping.stdout}{ping.stderr}; `make test-slurm` starts one")


def environment(threads: bool = True) -> dict[str, str]:
    """This environment for vgp-train (SLURM passes it on to the jobs), with one OpenMP thread
    unless `threads` is False (then the jobs choose theirs)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO)}
    if threads:
        environ["OMP_NUM_THREADS"] = "1"
    else:
        environ.pop("OMP_NUM_THREADS", None)
    return environ


def start_sweep(sweep_dir: Path, *overrides: str, threads: bool = True) -> subprocess.Popen:
    """`vgp-train -m` through the SLURM launcher, one job per subfolder named by its number."""
    command = [
        sys.executable, "-m", "vgp_bench.run.commands.train", "-m", *LAUNCHER, *overrides,
        f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${hydra.job.num}",
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        cwd=sweep_dir.parent,
        env=environment(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str]:
    """Wait for a sweep: its exit status and stderr."""
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


def wait_for(what: str, condition: Callable[[], object], timeout: float = 600) -> object:
    """Poll `condition` until it gives something true; fail naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def slurm_job_id(sweep_dir: Path, job: int) -> str:
    """The SLURM id (`123_1`) of job number `job` of a sweep, once submitted."""

    # submitit's folder per job: `<array id>_<job>`, or the job id alone in a one-job sweep
    pattern = re.compile(rf"\d+_{job}" + (r"|\d+" if job == 0 else ""))

    def find() -> str | None:
        folders = (sweep_dir / ".submitit").glob("*")
        return next((path.name for path in folders if pattern.fullmatch(path.name)), None)

    return str(wait_for(f"job {job} of {sweep_dir} to be submitted", find))


def recorded(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_until_training(run_dir: Path) -> None:
    """Until the run has finished its first epoch (metrics.json records its steps)."""
    wait_for(
        f"{run_dir} to train",
        lambda: recorded(run_dir).get("status") == "running" and recorded(run_dir).get("steps"),
    )


def held_after_requeue(job_id: str) -> bool:
    """Whether the job waits for its BeginTime: SLURM holds a requeued job about 2 minutes."""
    result = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True, timeout=30
    )
    return result.stdout.split() == ["PENDING", "BeginTime"]


def finish_hurrying_requeues(process: subprocess.Popen, job_id: str) -> tuple[int, str]:
    """Wait for a sweep, starting its job at once whenever SLURM holds it after a requeue (a
    real cluster waits those 2 minutes; what the job then does is the same)."""
    deadline = time.time() + 900
    while process.poll() is None and time.time() < deadline:
        if held_after_requeue(job_id):
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
        time.sleep(1)
    return finish(process, timeout=60)


def train_here(run_dir: Path, *overrides: str) -> None:
    """The same run, uninterrupted, in this machine's process (one thread, as the jobs)."""
    command = [
        sys.executable,
        "-m",
        "vgp_bench.run.commands.train",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]
    finished = subprocess.run(
        command, cwd=run_dir.parent, env=environment(), capture_output=True, text=True
    )
    assert finished.returncode == 0, finished.stderr[-3000:]


def resumed_steps(run_dir: Path) -> list[int]:
    """The steps at which the run resumed (train.log)."""
    log = (run_dir / "train.log").read_text() if (run_dir / "train.log").is_file() else ""
    return [int(step) for step in re.findall(r"resumed at step (\d+)", log)]


def test_a_sweep_of_two_configurations_reaches_the_report(tmp_path: Path, capsys) -> None:
    """Two jobs through the SLURM launcher, vgp-report on the sweep; each job took the one CPU
    SLURM gave it (threads unset: SLURM_CPUS_PER_TASK)."""
    sweep_dir = tmp_path / "sweep"
    code, stderr = finish(start_sweep(sweep_dir, "inference=vae,vgp", *TINY, threads=False))
    assert code == 0, stderr[-3000:]
    assert report.main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "2 run folders" in out and "2 in the tables, 0 not" in out
    logs = [path.read_text() for path in (sweep_dir / ".submitit").glob("*/*_log.out")]
    assert len(logs) == 2
    assert all("1 CPU threads (the allocation: SLURM_CPUS_PER_TASK=1)" in log for log in logs)


def test_a_failed_and_a_cancelled_job_give_a_line_each_and_exit_1(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    process = start_sweep(
        sweep_dir, *LONG, "optim.optimizer.lr=1e30,0.001", "trainer.max_nonfinite=1"
    )
    job = slurm_job_id(sweep_dir, 1)
    wait_until_training(sweep_dir / "1")
    subprocess.run(["scancel", job], check=True)
    code, stderr = finish(process)
    assert code == 1, stderr[-3000:]
    lines = stderr[stderr.index("vgp-train: 2 of 2 jobs did not finish:") :].splitlines()
    assert lines[1].startswith(f"  {sweep_dir / '0'}: failed: the bound or its gradient was NaN")
    # SLURM's SIGTERM first: the run checkpoints, then SLURM records the job cancelled
    assert re.match(
        rf"  {sweep_dir / '1'}: (interrupted|stopped): SLURM job {job} ended ", lines[2]
    )
    assert "CANCELLED" in lines[2]
    assert recorded(sweep_dir / "0")["status"] == "failed"


def test_a_job_preempted_by_usr2_is_requeued_and_resumes_exactly(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    process = start_sweep(sweep_dir, *LONG)
    job = slurm_job_id(sweep_dir, 0)
    wait_until_training(sweep_dir / "0")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    code, stderr = finish_hurrying_requeues(process, job)
    assert code == 0, stderr[-3000:]
    run_dir = sweep_dir / "0"
    assert recorded(run_dir)["status"] == "finished"
    assert "SIGUSR2: checkpoint saved" in (run_dir / "train.log").read_text()
    (step,) = resumed_steps(run_dir)
    assert 0 < step < STEPS  # resumed from the checkpoint written at the signal
    train_here(tmp_path / "straight", *LONG)
    assert_same_parameters(run_dir, tmp_path / "straight")


def test_a_timed_out_job_is_requeued_and_resumes_exactly(tmp_path: Path) -> None:
    """A real time limit of 2 minutes on a run that needs far more: SLURM signals USR2
    signal_delay_s before it (its check runs every 30 s or so: 80 to 110 s in, after the run's
    start-up even on a loaded machine, where 1 minute signalled some starts before the run
    folder existed), submitit counts a timeout and requeues the job once (max_num_timeout=1),
    the requeued job resumes from the signal's checkpoint and times out again, not requeued.
    Its parameters then equal those of an uninterrupted run to the same step."""
    sweep_dir = tmp_path / "sweep"
    endless = [*LONG, "trainer.max_steps=1000000", "trainer.epochs=100000"]
    process = start_sweep(
        sweep_dir,
        *endless,
        "hydra.launcher.timeout_min=2",
        "hydra.launcher.signal_delay_s=40",
        "hydra.launcher.max_num_timeout=1",
    )
    code, stderr = finish_hurrying_requeues(process, slurm_job_id(sweep_dir, 0))
    assert code == 1, stderr[-3000:]
    run_dir = sweep_dir / "0"
    assert f"  {run_dir}: preempted: Job not requeued because: timed-out too many" in stderr
    log = (run_dir / "train.log").read_text()
    assert log.count("this job is timed-out") == 2  # submitit's word on each signal
    (resumed,) = resumed_steps(run_dir)
    stopped = load_checkpoint(run_dir / "checkpoints" / "last.pt")["state"]["step"]
    assert 0 < resumed < stopped
    train_here(tmp_path / "straight", *endless, f"trainer.max_steps={stopped}")
    assert_same_parameters(run_dir, tmp_path / "straight")


def test_a_timeout_without_requeue_says_so_and_the_sweep_resumes(tmp_path: Path) -> None:
    """max_num_timeout 0 (the config's default): no requeue, exit 1 with the job's line, the
    run `preempted` with its checkpoint; the same command again finishes it exactly."""
    sweep_dir = tmp_path / "sweep"
    # 10 minutes: SLURM's own signal would come after 8, and submitit counts any SIGUSR2 as a
    # timeout (it guarantees min(80%, all but 10 minutes) of the time)
    overrides = [*LONG, "hydra.launcher.timeout_min=10", "hydra.launcher.max_num_timeout=0"]
    process = start_sweep(sweep_dir, *overrides)
    job = slurm_job_id(sweep_dir, 0)
    wait_until_training(sweep_dir / "0")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    code, stderr = finish(process)
    assert code == 1, stderr[-3000:]
    run_dir = sweep_dir / "0"
    line = stderr[stderr.index("vgp-train: 1 of 1 jobs did not finish:") :].splitlines()[1]
    assert line.startswith(f"  {run_dir}: preempted: Job not requeued because: timed-out too many")
    assert "run the sweep again to resume" in line
    assert recorded(run_dir)["status"] == "preempted"
    code, stderr = finish(start_sweep(sweep_dir, *overrides))
    assert code == 0, stderr[-3000:]
    assert recorded(run_dir)["status"] == "finished" and len(resumed_steps(run_dir)) == 1
    train_here(tmp_path / "straight", *LONG)
    assert_same_parameters(run_dir, tmp_path / "straight")


def test_two_tasks_of_one_job_run_ddp_and_match_one_process(tmp_path: Path) -> None:
    """tasks_per_node=2: the tasks join one gloo group from SLURM's variables, and agree with
    one process with the whole batch (tests/test_distributed.py's tolerance)."""
    sweep_dir = tmp_path / "sweep"
    code, stderr = finish(
        start_sweep(sweep_dir, *DDP_COMMON, "hydra.launcher.tasks_per_node=2", "device=cpu")
    )
    assert code == 0, stderr[-3000:]
    train_here(tmp_path / "single", *DDP_COMMON, "trainer.micro_batches=2")
    ddp = load_checkpoint(sweep_dir / "0" / "checkpoints" / "last.pt")
    single = load_checkpoint(tmp_path / "single" / "checkpoints" / "last.pt")
    assert ddp["state"]["step"] == single["state"]["step"] == 6
    for part in ("model", "heads"):
        for name, value in single[part].items():
            torch.testing.assert_close(ddp[part][name], value, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(ddp["generators"], single["generators"]))
    metrics = recorded(sweep_dir / "0")
    assert metrics["world_size"] == 2 and metrics["status"] == "finished"


def test_usr2_outside_submitit_stops_with_a_checkpoint(tmp_path: Path) -> None:
    """Without submitit's handler a SIGUSR2 still checkpoints; the status says preempted and
    the exit status is 128 + SIGUSR2."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "vgp_bench.run.commands.train",
        *LONG,
        f"hydra.run.dir={run_dir}",
    ]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=environment(), stderr=subprocess.PIPE, text=True
    )
    wait_until_training(run_dir)
    process.send_signal(signal.SIGUSR2)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGUSR2, stderr[-3000:]
    assert "SIGUSR2: checkpoint saved" in stderr
    assert recorded(run_dir)["status"] == "preempted"
