"""Shared test helpers: compose the real configs with tiny, fast overrides."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

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


def compose_config(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The config vgp-train would see for these command-line overrides."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)
