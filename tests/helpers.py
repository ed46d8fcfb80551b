"""Shared test helpers: compose the real configs with tiny, fast overrides."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vgp_bench.runtime import compose_config

__all__ = ["CONFIG_DIR", "REPO", "TINY", "compose_config", "project_files"]

REPO = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO / "configs"

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
