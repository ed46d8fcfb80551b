"""Everything a run is made of, built from its config: data, model, heads, optimizer, schedule."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import get_class, get_method
from omegaconf import DictConfig, OmegaConf
from torch import nn

from vgp_bench.data.base import DatasetBundle
from vgp_bench.distributed import DistributedContext
from vgp_bench.inference.base import build_heads
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.runtime import build, limit_gpu_memory, resolve_device
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
    device = resolve_device(str(cfg.device))
    if context is not None and context.enabled and device.type == "cuda":
        device = torch.device("cuda", context.local_rank)
    limit_gpu_memory(device, cfg.trainer.get("gpu_memory_fraction"))
    data = load_data(cfg) if data is None else data
    torch.manual_seed(int(cfg.seed))  # parameter initialisation
    model = build(cfg.model, x_shape=data.x_shape)
    model.start_from_data(data.train.pixel_means())
    model = model.to(device)
    heads = build_heads(build(cfg.inference), model.sites).to(device)
    train_model = bool(cfg.trainer.get("train_model", True))
    model.requires_grad_(train_model)  # false: only the inference heads train
    parameters = [*(model.parameters() if train_model else []), *heads.parameters()]
    optimizer = build(cfg.optim.optimizer, params=parameters, **multi_tensor_update(cfg))
    factor = functools.partial(build(cfg.optim.schedule), **epoch_length(cfg, data))
    schedule = StepSizeSchedule(optimizer, factor)
    return Components(data.to(device), model, heads, optimizer, schedule, device)


def epoch_length(cfg: DictConfig, data: DatasetBundle) -> dict[str, int]:
    """`steps_per_epoch` for a schedule whose factor counts epochs (its config leaves it out:
    it follows from the training split and the batch size)."""
    target = get_method(str(cfg.optim.schedule._target_))
    if "steps_per_epoch" not in inspect.signature(target).parameters:
        return {}
    trainer = cfg.trainer
    steps = data.train.batch_count(int(trainer.batch_size), bool(trainer.drop_last))
    return {"steps_per_epoch": steps}


def checkpoint_config(
    checkpoint: dict, device_name: str = "auto", data_dir: str | None = None
) -> DictConfig:
    """The resolved config a checkpoint was trained with, on `device_name` and `data_dir`."""
    missing = [key for key in ("config", "model", "heads") if key not in checkpoint]
    if missing:
        raise ValueError(
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


def multi_tensor_update(cfg: DictConfig) -> dict[str, bool]:
    """`foreach=True` unless the optimizer config sets it: torch's optimizers loop over the
    parameters one tensor at a time on CPU; the multi-tensor update computes the same numbers
    (bit for bit, tests/test_train.py) with one dispatch per operation instead of one per tensor.
    """
    node = cfg.optim.optimizer
    if "foreach" in node:
        return {}
    target = get_class(str(node._target_))
    return {"foreach": True} if "foreach" in inspect.signature(target).parameters else {}
