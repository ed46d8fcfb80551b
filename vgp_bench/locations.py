"""Where the package finds its Hydra configs, in a checkout or installed from a wheel (no torch
imported here: the console scripts answer --help from it)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import vgp_bench


def checkout_root() -> Path | None:
    """The repository folder when the package runs from a checkout (a development install:
    `pip install -e .`, or the folder on sys.path); None when it is installed from a wheel."""
    root = Path(__file__).resolve().parent.parent  # vgp_bench/..
    if (root / "setup.cfg").is_file() and (root / "configs" / "config.yaml").is_file():
        return root
    return None


def config_dir() -> str:
    """The Hydra configs, as an absolute path: the checkout's top-level configs/ in a
    development install, else the copy a wheel carries as package data (vgp_bench/configs,
    mapped there by setup.py)."""
    root = checkout_root()
    if root is not None:
        return str(root / "configs")
    return str(resources.files(vgp_bench).joinpath("configs"))


# Absolute, so console scripts and `python -m` find the same files from any folder.
CONFIG_DIR = config_dir()
