"""Run-time plumbing: devices, threads, config nodes built into objects, code version (configs are
composed by run/config/store.py, with the schemas registered)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import vgp_bench
from vgp_bench.errors import ConfigError
from vgp_bench.locations import checkout_root


def sweep_job_number() -> int | None:
    """Hydra's job number inside a multirun (`hydra.job.num`); None outside one."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    return int(hydra_cfg.job.num) if hydra_cfg.mode == RunMode.MULTIRUN else None


def resolve_device(
    name: str, job_number: int | None = None, gpu_count: int | None = None
) -> torch.device:
    """`auto` → CUDA when present, else CPU; `cuda` without a GPU is an error.

    In a sweep, `auto` puts job k on GPU k mod (GPUs visible): N jobs at once on G GPUs (the
    joblib launcher) share them round-robin. `job_number` defaults to Hydra's job number and
    `gpu_count` to torch.cuda.device_count().
    """
    if name == "auto":
        gpu_count = torch.cuda.device_count() if gpu_count is None else gpu_count
        if gpu_count < 1:
            return torch.device("cpu")
        job_number = sweep_job_number() if job_number is None else job_number
        return torch.device("cuda", (job_number or 0) % gpu_count)
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=auto or cpu")
    if name != "cpu" and not name.startswith("cuda"):
        raise ConfigError(f"device must be auto, cpu or cuda[:N], got {name!r}")
    return torch.device(name)


def thread_count(value: Any) -> int | None:
    """`threads` (a config value or VGP_THREADS's text) as a count >= 1; None: torch's default."""
    if value is None or str(value).strip().lower() in ("", "null", "none"):
        return None
    try:
        count = int(str(value).strip())
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(
            f"threads must be an integer >= 1 or null (torch's default), got {value!r}; set it "
            "with threads=N or the environment variable VGP_THREADS"
        )
    return count


def allocated_threads(environ: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """The CPUs this process was given: SLURM's SLURM_CPUS_PER_TASK, else its CPU affinity
    where that is a subset of the machine's CPUs; with where the count comes from. None where
    OMP_NUM_THREADS is set (torch's default follows it) or nothing restricts the process."""
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS"):
        return None
    slurm = environ.get("SLURM_CPUS_PER_TASK", "").strip()
    if slurm.isdigit() and int(slurm) >= 1:
        return int(slurm), f"SLURM_CPUS_PER_TASK={slurm}"
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if affinity is not None and affinity < (os.cpu_count() or affinity):  # a subset of the CPUs
        return affinity, "the process's CPU affinity"
    return None


def apply_threads(value: Any) -> str:
    """Set torch's CPU threads from `threads`; unset, from the allocation (`allocated_threads`),
    else torch's default; in words."""
    count = thread_count(value)
    if count is not None:
        torch.set_num_threads(count)
        return f"{count} CPU threads (threads={count})"
    allocated = allocated_threads()
    if allocated is not None:
        torch.set_num_threads(allocated[0])
        return f"{allocated[0]} CPU threads (the allocation: {allocated[1]})"
    return (
        f"{torch.get_num_threads()} CPU threads (torch's default, one per core; with other "
        "jobs on the machine set threads=1 or VGP_THREADS=1)"
    )


def limit_gpu_memory(device: torch.device, fraction: float | None) -> None:
    """Cap this process's share of the GPU's memory (`trainer.gpu_memory_fraction`), so that
    jobs sharing a GPU cannot starve each other; nothing to do on CPU."""
    if fraction is None:
        return
    if not 0 < float(fraction) <= 1:
        raise ConfigError(
            f"trainer.gpu_memory_fraction must be in (0, 1] or null, got {fraction}; with N "
            "jobs per GPU use about 0.9 / N"
        )
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(float(fraction), device)


def build(node: DictConfig, **runtime_kwargs: Any) -> Any:
    """Instantiate a config node, dropping its descriptive `name` key; call partials at once."""
    spec = OmegaConf.to_container(node, resolve=True)
    assert isinstance(spec, dict)
    spec.pop("name", None)
    built = instantiate(spec)
    return built(**runtime_kwargs) if runtime_kwargs else built


def code_version() -> str:
    """Package version plus the git commit (and `-dirty`) when run from a checkout."""
    root = checkout_root()
    if root is None:  # installed: a git repository around site-packages is not this code's
        return vgp_bench.__version__
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return vgp_bench.__version__
    return f"{vgp_bench.__version__}+g{commit}" if commit else vgp_bench.__version__


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    """A generator on `device` seeded from the config."""
    return torch.Generator(device=device).manual_seed(int(seed))
