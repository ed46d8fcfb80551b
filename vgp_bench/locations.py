"""Where the package finds its Hydra configs, in a checkout or installed from a wheel, and the
options each config group offers there (no torch imported here: the console scripts answer
--help from it)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf

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
    mapped there by setup.cfg)."""
    root = checkout_root()
    if root is not None:
        return str(root / "configs")
    return str(resources.files(vgp_bench).joinpath("configs"))


# Absolute, so console scripts and `python -m` find the same files from any folder.
CONFIG_DIR = config_dir()


def group_options(group: str, config_dir: str | Path = CONFIG_DIR) -> list[str]:
    """The options of a config group, `<config_dir>/<group>/*.yaml`, by name."""
    return sorted(path.stem for path in (Path(config_dir) / group).glob("*.yaml"))


def listed_options(group: str) -> str:
    """A group's options as the help lists them: `a, b, c`."""
    return ", ".join(group_options(group))


# `${vgp_options:GROUP}` in a config (configs/config.yaml's help): the group's options, so that
# a new file of configs/<group>/ is listed with no other edit
if not OmegaConf.has_resolver("vgp_options"):
    OmegaConf.register_new_resolver("vgp_options", listed_options)
