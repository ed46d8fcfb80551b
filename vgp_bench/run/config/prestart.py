"""Checks a command makes before Hydra creates its run folder: bad settings, a `+key` no
config defines, a folder that cannot be made or lies inside a run folder, a missing or damaged
data file are one line each, and nothing is created; a folder Hydra then makes is removed at
exit if the start wrote nothing into it (a failure or a Ctrl-C before the run began)."""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vgp_bench.errors import ConfigError, UserError
from vgp_bench.failures import refuse


def first_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def folder_problem(path: Path) -> str | None:
    """Why the folder `path` cannot be used or created (reads only), or None."""
    try:
        limit = os.pathconf(first_existing(path.absolute()), "PC_NAME_MAX")
    except OSError:
        limit = 255
    long = [part for part in path.parts if len(part.encode()) > limit]
    if long:
        size = len(long[0].encode())
        return f"the folder name {long[0][:24]}... has {size} bytes, over the limit of {limit}"
    if path.exists() or path.is_symlink():
        return None if path.is_dir() else f"{path} is a file, not a folder"
    ancestor = first_existing(path.absolute())
    if not ancestor.is_dir():
        return f"cannot create {path}: {ancestor} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot create {path}: {ancestor} is read-only"
    return None


def check_run_folder(path: Path) -> None:
    from vgp_bench.run.folder.run_identity import refuse_nested

    problem = folder_problem(path)
    if problem:
        raise ConfigError(f"{problem}; pick another hydra.run.dir")
    refuse_nested(path)


def check_data_file(cfg: DictConfig) -> None:
    """The data file a run reads exists and has its layout (MNIST's; the other loaders make
    their data or check it on loading)."""
    dataset = cfg.get("dataset")
    if dataset is None or not str(dataset.get("_target_", "")).endswith(".load_mnist"):
        return
    from vgp_bench.data.mnist import check_mnist_file

    data_dir = Path(str(cfg.data_dir)).expanduser().absolute()
    check_mnist_file(data_dir, dataset.get("path"))


def folders_to_create(path: Path) -> list[Path]:
    """`path` and those of its ancestors that do not exist, deepest first (Hydra makes them)."""
    missing = []
    path = path.absolute()
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def remove_if_unused(folders: Sequence[Path]) -> None:
    """Remove each of `folders` (deepest first) that is still empty: a start that ended before
    writing anything (refused, failed or interrupted) leaves no folder behind. `rmdir` removes
    only an empty folder, so nothing written is ever lost."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (the run wrote something), or already gone
            return


def check_train_start(cfg: DictConfig, overrides: Sequence[str], run_dir: Path) -> None:
    """What vgp-train checks before its run folder exists."""
    from vgp_bench.run.config.settings import (
        check_added_keys,
        check_compile_device,
        check_train_settings,
    )
    from vgp_bench.run.folder.checkpoint import initial_model

    check_added_keys(overrides, cfg)
    check_train_settings(cfg)
    check_compile_device(cfg)
    check_run_folder(run_dir)
    check_data_file(cfg)
    if not run_dir.exists():  # a fresh start: trainer.init_model is used
        initial_model(cfg)


def check_fit_start(cfg: DictConfig, run_dir: Path) -> None:
    """What vgp-fit checks before its run folder exists."""
    from vgp_bench.catalog import check_fit_families
    from vgp_bench.run.config.settings import check_fit_settings

    check_fit_settings(cfg)
    check_fit_families(cfg.families)
    check_run_folder(run_dir)


class PreStart(Callback):
    """Hydra callback: the command's checks, before Hydra creates the run folder; a refusal is
    one line on stderr and exit status 1."""

    def __init__(self, command: str) -> None:
        self.command = command

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        HydraConfig.instance().set_config(config)  # for ${hydra:...} in hydra.run.dir
        run_dir = Path(str(config.hydra.run.dir))
        overrides = list(OmegaConf.to_container(config.hydra.overrides.task) or [])
        task = OmegaConf.masked_copy(config, [key for key in config if key != "hydra"])
        self.refuse_on_error(lambda: self.check(task, overrides, run_dir))
        # the folders Hydra is about to make go again at exit if nothing was written there
        atexit.register(remove_if_unused, folders_to_create(run_dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        overrides = list(OmegaConf.to_container(config.hydra.overrides.task) or [])
        if self.command == "vgp-train":
            from vgp_bench.run.config.settings import check_added_keys

            self.refuse_on_error(lambda: check_added_keys(overrides))

    def check(self, cfg: DictConfig, overrides: Sequence[str], run_dir: Path) -> None:
        if self.command == "vgp-train":
            check_train_start(cfg, overrides, run_dir)
        elif self.command == "vgp-fit":
            check_fit_start(cfg, run_dir)

    def refuse_on_error(self, check: Any) -> None:
        try:
            check()
        except UserError as error:  # a bad setting, a missing or damaged data file
            refuse(self.command, str(error))
