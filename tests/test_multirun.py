"""Sweeps: the launcher configs, and a real multirun of two experiments read by vgp-report."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from tests.helpers import compose_config
from vgp_bench.analysis import report

REPO = Path(__file__).resolve().parent.parent
LAUNCHERS = REPO / "configs" / "hydra" / "launcher"

# The documented fields of hydra-joblib-launcher 1.2 (JobLibLauncherConf), all passed on to
# joblib.Parallel, and of hydra-submitit-launcher 1.2 (SlurmQueueConf).
JOBLIB_FIELDS = {
    "_target_",
    "n_jobs",
    "backend",
    "prefer",
    "require",
    "verbose",
    "timeout",
    "pre_dispatch",
    "batch_size",
    "temp_folder",
    "max_nbytes",
    "mmap_mode",
}


@dataclass
class SlurmQueueSchema:
    """The fields and defaults of hydra-submitit-launcher 1.2's SlurmQueueConf."""

    _target_: str = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    timeout_min: int = 60
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    tasks_per_node: int = 1
    mem_gb: int | None = None
    nodes: int = 1
    name: str = "${hydra.job.name}"
    stderr_to_stdout: bool = False
    partition: str | None = None
    qos: str | None = None
    comment: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    gres: str | None = None
    cpus_per_gpu: int | None = None
    gpus_per_task: int | None = None
    mem_per_gpu: str | None = None
    mem_per_cpu: str | None = None
    account: str | None = None
    signal_delay_s: int = 120
    max_num_timeout: int = 0
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    array_parallelism: int = 256
    setup: list[str] | None = None


@pytest.fixture
def fake_submitit_schema() -> Iterator[None]:
    """Register `hydra/launcher/submitit_slurm` as the installed plugin would, then remove it."""
    store = ConfigStore.instance()
    store.store(
        group="hydra/launcher",
        name="submitit_slurm",
        node=SlurmQueueSchema,
        provider="test_multirun",
    )
    yield
    del store.repo["hydra"]["launcher"]["submitit_slurm.yaml"]


def test_joblib_launcher_config_names_the_plugin_class():
    config = OmegaConf.load(LAUNCHERS / "joblib.yaml")
    assert config._target_ == "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert set(config) <= JOBLIB_FIELDS
    assert config.n_jobs >= 1


def test_slurm_launcher_config_names_the_plugin_class():
    """vgp-bench's subclass of the plugin's launcher, which waits for every job."""
    config = OmegaConf.load(LAUNCHERS / "slurm.yaml")
    assert config._target_ == "hydra_plugins.vgp_bench_plugins.slurm_launcher.SlurmLauncher"
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
        from hydra_plugins.vgp_bench_plugins import slurm_launcher

        # by name: Hydra's plugin scan re-executes the plugin's module, making new classes
        bases = [f"{cls.__module__}.{cls.__name__}" for cls in slurm_launcher.SlurmLauncher.mro()]
        assert "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher" in bases
    assert list(config.defaults) == ["submitit_slurm", "_self_"]
    assert set(config) - {"defaults"} <= set(SlurmQueueSchema.__dataclass_fields__)
    assert (config.gpus_per_node, config.tasks_per_node, config.partition) == (1, 1, None)


def test_launchers_compose_into_the_hydra_config(fake_submitit_schema):
    slurm = compose_config(["hydra/launcher=slurm"], return_hydra_config=True).hydra.launcher
    joblib = compose_config(["hydra/launcher=joblib"], return_hydra_config=True).hydra.launcher
    assert slurm._target_.endswith("vgp_bench_plugins.slurm_launcher.SlurmLauncher")
    assert slurm.timeout_min == OmegaConf.load(LAUNCHERS / "slurm.yaml").timeout_min
    assert slurm.qos is None and slurm.array_parallelism == 18  # schema default, then ours
    assert joblib._target_.endswith("joblib_launcher.JoblibLauncher")
    assert joblib.n_jobs == OmegaConf.load(LAUNCHERS / "joblib.yaml").n_jobs


# A few-second CPU run: tiny synthetic images and networks.
TINY = [
    "dataset=synthetic",
    "dataset.shape=[1,8,8]",
    "dataset.n_train=32",
    "dataset.n_valid=16",
    "dataset.n_test=16",
    "model.latent_dims=[3]",
    "model.hidden_dims=[[16]]",
    "trainer.batch_size=16",
    "trainer.max_steps=2",
    "trainer.progress=false",
    "trainer.image_every=0",
    "eval.is_samples=2",
    "eval.chunk_size=2",
    "eval.batch_size=8",
    "device=cpu",
]


def run_sweep(*overrides: str) -> None:
    """`vgp-train -m OVERRIDES` through the real entry point, one thread; it must succeed."""
    command = [sys.executable, "-m", "vgp_bench.run.commands.train", "-m", *overrides]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    finished = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=600
    )
    assert finished.returncode == 0, finished.stderr[-3000:]


def test_multirun_of_two_configurations_reaches_the_report(tmp_path, capsys):
    """`vgp-train -m inference=vae,vgp seed=0,1` through the real entry point, then vgp-report."""
    sweep_dir = tmp_path / "sweep"
    run_sweep(
        "inference=vae,vgp",
        "seed=0,1",
        *TINY,
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweep.subdir=${hydra.job.num}_${hydra:runtime.choices.inference}_${seed}",
    )
    folders = sorted(path.name for path in sweep_dir.iterdir() if path.is_dir())
    assert folders == ["0_vae_0", "1_vae_1", "2_vgp_0", "3_vgp_1"]

    assert report.main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "4 run folders" in out and "4 in the tables, 0 not" in out
    table1, gaps = out.split("Where the bound goes")
    rows = [line for line in table1.splitlines() if line.startswith("| DLGM")]
    assert len(rows) == 2, out
    assert rows[0].startswith("| DLGM 1hl + VAE | n=2 (0, 1) |")
    # VGP rows name their structure (the default: global outputs around the identity)
    assert rows[1].startswith(
        "| DLGM 1hl + VGP (global T, identity mean, sigma=0.1 s, m=500) | n=2 (0, 1) |"
    )
    assert len([line for line in gaps.splitlines() if line.startswith("| DLGM")]) == 2
    assert "Not in the tables" not in out


def test_the_joblib_launcher_runs_jobs_side_by_side(tmp_path):
    """N jobs at once (`hydra/launcher=joblib`), each on device=auto: on a GPU machine job k
    takes GPU k mod count with a capped memory share; here both run on the CPU."""
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher", reason="pip install -e .[launchers] for joblib"
    )
    sweep_dir = tmp_path / "sweep"
    run_sweep(
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=0,1",
        *[override for override in TINY if not override.startswith("device=")],
        "device=auto",
        "trainer.gpu_memory_fraction=0.45",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweep.subdir=${hydra.job.num}",
    )
    seeds = []
    for job in ("0", "1"):
        metrics = json.loads((sweep_dir / job / "metrics.json").read_text())
        assert metrics["status"] == "finished" and metrics["steps"] == 2
        seeds.append(metrics["seed"])
    assert seeds == [0, 1]


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_sweep_with_a_diverging_job_ends_with_its_line_and_exit_1(tmp_path, launcher):
    """Every job runs; the sweep then names the one that did not finish, and exits 1."""
    if launcher == "joblib":
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="the launchers extra")
    sweep_dir = tmp_path / "sweep"
    command = [
        sys.executable, "-m", "vgp_bench.run.commands.train", "-m", *TINY,
        *(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []),
        "optim.optimizer.lr=1e30,0.001", "trainer.max_nonfinite=1",
        f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${hydra.job.num}",
    ]  # fmt: skip
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    finished = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=600
    )
    assert finished.returncode == 1, finished.stderr[-3000:]
    summary = finished.stderr[finished.stderr.index("vgp-train: 1 of 2 jobs") :].splitlines()
    assert summary[0] == "vgp-train: 1 of 2 jobs did not finish:"
    assert summary[1].startswith(f"  {sweep_dir / '0'}: failed: the bound or its gradient")
    assert len(summary) == 2
    assert json.loads((sweep_dir / "1" / "metrics.json").read_text())["status"] == "finished"
