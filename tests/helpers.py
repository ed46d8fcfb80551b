"""Shared test helpers: compose the real configs with tiny, fast overrides."""

from __future__ import annotations

from pathlib import Path

from vgp_bench.runtime import compose_config

__all__ = ["CONFIG_DIR", "REPO", "TINY", "compose_config"]

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
