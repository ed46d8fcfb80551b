"""Everything a run is made of, built from its config: data, model, heads, optimizer, schedule."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import get_class, get_method
from omegaconf import DictConfig, OmegaConf
from torch import nn

from vgp_bench.data.base import DatasetBundle
from vgp_bench.errors import CorruptDataError
from vgp_bench.inference.base import build_heads
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run.config.typed import top_level, trainer_settings
from vgp_bench.run.process.distributed import DistributedContext
from vgp_bench.run.process.runtime import build, limit_gpu_memory, resolve_device
from vgp_bench.schedules import StepSizeSchedule


@dataclass
class Components:
    """Everything a run is built from its config."""

    data: DatasetBundle
    model: LatentVariableModel
    heads: nn.ModuleDict
    optimizer: torch.optim.Optimizer
    schedule: StepSizeSchedule
    device: torch.device

    @property
    def parameters(self) -> list[nn.Parameter]:
        return [*self.model.parameters(), *self.heads.parameters()]


def load_data(cfg: DictConfig) -> DatasetBundle:
    """Build the dataset of `cfg.dataset` with the absolute data folder."""
    data_dir = str(Path(cfg.data_dir).expanduser().resolve())
    return build(cfg.dataset, data_dir=data_dir)


def build_components(
    cfg: DictConfig, data: DatasetBundle | None = None, context: DistributedContext | None = None
) -> Components:
    """Dataset, model, heads, optimizer and schedule from the config (parameters seeded)."""
    settings, trainer = top_level(cfg), trainer_settings(cfg)
    device = resolve_device(settings.device)
    if context is not None and context.enabled and device.type == "cuda":
        device = torch.device("cuda", context.local_rank)
    limit_gpu_memory(device, trainer.gpu_memory_fraction)
    data = load_data(cfg) if data is None else data
    torch.manual_seed(settings.seed)  # parameter initialisation
    model = build(cfg.model, x_shape=data.x_shape)
    model.start_from_data(data.train.pixel_means())
    model = model.to(device)
    model.checks_inputs = False  # every batch comes from an ImageSplit: binary by construction
    heads = build_heads(build(cfg.inference), model.sites).to(device)
    train_model = trainer.train_model
    model.requires_grad_(train_model)  # false: only the inference heads train
    parameters = [*(model.parameters() if train_model else []), *heads.parameters()]
    optimizer = build(cfg.optim.optimizer, params=parameters, **multi_tensor_update(cfg, device))
    schedule = StepSizeSchedule(optimizer, schedule_factor(cfg, data))
    return Components(data.to(device), model, heads, optimizer, schedule, device)


def schedule_factor(cfg: DictConfig, data: DatasetBundle) -> Callable[[int], float]:
    """The step-size factor of `optim.schedule` as a plain partial of its function.

    Hydra's instantiated partials re-authorize their target at every call (about 0.8 ms, more
    than a batch-20 step's arithmetic); the schedule runs every step, so its function is
    resolved once here, through Hydra's own authorized lookup, and bound to its settings.
    """
    node = OmegaConf.to_container(cfg.optim.schedule, resolve=True)
    assert isinstance(node, dict)
    settings = {key: value for key, value in node.items() if not str(key).startswith("_")}
    settings.pop("name", None)
    function = get_method(str(node["_target_"]))
    if "steps_per_epoch" in inspect.signature(function).parameters:
        # a factor that counts epochs: its length follows from the training split and batch
        trainer = cfg.trainer
        batch_size, drop_last = int(trainer.batch_size), bool(trainer.drop_last)
        settings["steps_per_epoch"] = data.train.batch_count(batch_size, drop_last)
    return functools.partial(function, **settings)


def checkpoint_config(
    checkpoint: dict, device_name: str = "auto", data_dir: str | None = None
) -> DictConfig:
    """The resolved config a checkpoint was trained with, on `device_name` and `data_dir`."""
    missing = [key for key in ("config", "model", "heads") if key not in checkpoint]
    if missing:
        raise CorruptDataError(
            f"the checkpoint has no {', '.join(missing)}: not one a vgp-bench run wrote; "
            "pick a run's checkpoints/best.pt or last.pt"
        )
    cfg = OmegaConf.create(checkpoint["config"])
    cfg.device = device_name
    if data_dir is not None:
        cfg.data_dir = data_dir
    return cfg


def components_from_checkpoint(cfg: DictConfig, checkpoint: dict) -> Components:
    """The run's components built from `cfg`, with the checkpoint's model and heads."""
    parts = build_components(cfg)
    parts.model.load_state_dict(checkpoint["model"])
    parts.heads.load_state_dict(checkpoint["heads"])
    return parts


def multi_tensor_update(cfg: DictConfig, device: torch.device) -> dict[str, bool]:
    """`foreach` (each operation over every tensor in one call), unless the optimizer config
    sets it, or on CPU for an optimizer with a CPU update of its own (`cpu_update_of_its_own`:
    the RMSprop of optimizers.py, which updates its small tensors so itself).

    Both compute the same numbers (bit for bit, tests/test_train.py and test_burda_protocol.py).
    On CUDA it saves a kernel launch per tensor; on this project's CPU it saves a Python call
    per tensor and operation: faster for every optimizer on the parameters the studies train
    (make bench's optimizer_update, docs/performance.md).
    """
    node = cfg.optim.optimizer
    if "foreach" in node:
        return {}
    target = get_class(str(node._target_))
    if "foreach" not in inspect.signature(target).parameters:
        return {}
    if device.type != "cuda" and getattr(target, "cpu_update_of_its_own", False):
        return {"foreach": False}
    return {"foreach": True}
