"""Shared test helpers: compose the real configs with tiny, fast overrides."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from vgp_bench.run.config.store import compose_config

__all__ = [
    "CONFIG_DIR",
    "REPO",
    "SEED_SHIFT",
    "TINY",
    "compose_config",
    "load_script",
    "paper_form",
    "project_files",
    "solve_tolerance",
    "varied_seed",
]

REPO = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO / "configs"
PAPER_FORM = CONFIG_DIR / "inference" / "vgp_form" / "paper.yaml"

# VGP_TEST_SEED=N shifts the seeds of the tests whose claim holds for every draw (an identity of
# two computations checked to a tolerance derived from it); statistical tests keep their seeds,
# their thresholds being chosen for those draws. scripts/test_variations.sh runs seed1.
SEED_SHIFT = int(os.environ.get("VGP_TEST_SEED", "0"))


def load_script(name: str) -> Any:
    """scripts/<name>.py as a module (the scripts are files, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def varied_seed(seed: int) -> int:
    """`seed` plus 1000 x VGP_TEST_SEED (unset: 0), clear of the small seeds a test also uses."""
    return seed + 1000 * SEED_SHIFT


def solve_tolerance(factor: torch.Tensor, reference: torch.Tensor) -> float:
    """cond(L L^T) x eps of L's dtype x the largest |reference|, for a Cholesky factor L.

    Two float computations through a solve with L L^T that are equal in exact arithmetic but
    round differently (another order of sums, a shared or a fresh factor) can differ by about
    this much: a solve amplifies rounding by up to the condition number.
    """
    with torch.no_grad():
        condition = torch.linalg.cond(factor @ factor.mT).max().item()
    return condition * torch.finfo(factor.dtype).eps * reference.abs().max().item()


# A few-second CPU run: tiny synthetic images and networks.
TINY = [
    "dataset=synthetic",
    "inference=vae",
    "dataset.shape=[1,8,8]",
    "dataset.n_train=64",
    "dataset.n_valid=16",
    "dataset.n_test=16",
    "model.latent_dims=[3]",
    "model.hidden_dims=[[16]]",
    "trainer.batch_size=16",
    "trainer.epochs=2",
    "trainer.progress=false",
    "trainer.log_every=2",
    "eval.is_samples=8",
    "eval.chunk_size=4",
    "eval.batch_size=8",
    "device=cpu",
]


def project_files() -> list[str]:
    """The checkout's files as git sees them (tracked, and new ones not ignored), relative."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to know which files belong to the project")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if (REPO / name).is_file()]


def paper_form() -> dict[str, Any]:
    """The VGP options of the paper's form (configs/inference/vgp_form/paper.yaml), for heads
    built in tests over VGPHead's defaults (VGPOptions, which configs/inference/vgp.yaml states)."""
    options = OmegaConf.to_container(OmegaConf.load(PAPER_FORM))
    assert isinstance(options, dict)
    return {str(key): value for key, value in options.items()}


def total_stage_epochs(stages: int = 8, growth: int = 3) -> int:
    """Epochs of all stages of `schedules.burda_stages` together: (3^8 - 1) / 2 = 3280."""
    return sum(growth**stage for stage in range(stages))
