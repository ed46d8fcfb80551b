"""Data parallelism through torch.distributed (torchrun): rank bookkeeping and small collectives."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands among the ranks; world_size 1 means no distribution, unless
    a one-rank process group was joined on purpose (`joined`: the DDP path with one rank)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    joined: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1 or self.joined

    def all_true(self, flags: torch.Tensor) -> torch.Tensor:
        """Element-wise AND of a boolean vector over the ranks (one collective)."""
        if not self.enabled:
            return flags
        as_int = flags.to(torch.int32)
        dist.all_reduce(as_int, op=dist.ReduceOp.MIN)
        return as_int.bool()

    def gather_objects(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank."""
        if not self.enabled:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's `value` on every rank."""
        if not self.enabled:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: `node[03-05,7],gpu1` -> `node03`."""
    head = nodelist.split(",", 1)[0] if "[" not in nodelist.split(",", 1)[0] else nodelist
    prefix, _, ranges = head.partition("[")
    if not ranges:
        return prefix
    return prefix + ranges.split(",", 1)[0].split("-", 1)[0].rstrip("]")


def slurm_rendezvous(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """torchrun's variables for a task of a SLURM job step of several tasks (srun, submitit's
    tasks_per_node): rank, world size, local rank, and rank 0's host with a port from the job
    id. Empty where torchrun's are already set, or the step has one task."""
    if "RANK" in environ or int(environ.get("SLURM_STEP_NUM_TASKS", "1")) <= 1:
        return {}
    return {
        "RANK": environ["SLURM_PROCID"],
        "WORLD_SIZE": environ["SLURM_STEP_NUM_TASKS"],
        "LOCAL_RANK": environ.get("SLURM_LOCALID", "0"),
        "MASTER_ADDR": first_host(environ.get("SLURM_STEP_NODELIST", "127.0.0.1")),
        "MASTER_PORT": str(20000 + int(environ.get("SLURM_JOB_ID", "0")) % 20000),
    }


def adopt_slurm_rendezvous() -> None:
    """Set torchrun's variables from SLURM's (`slurm_rendezvous`), so that the tasks of one
    SLURM job step join one process group as torchrun's ranks do."""
    os.environ.update(slurm_rendezvous(os.environ))


def init_distributed(backend: str | None = None) -> DistributedContext:
    """Join the process group torchrun (or a SLURM step of several tasks) describes in the
    environment (no-op when alone).

    A single torchrun rank joins only when `backend` is named (trainer.ddp_backend=nccl|gloo):
    the whole DDP path then runs with one rank, which is how `make gpu-check` tests NCCL.
    """
    adopt_slurm_rendezvous()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    launched_by_torchrun = "RANK" in os.environ and "MASTER_ADDR" in os.environ
    if world_size <= 1 and not (backend and launched_by_torchrun):
        return DistributedContext()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if chosen == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=chosen)
    return DistributedContext(
        rank=rank, world_size=world_size, local_rank=local_rank, joined=world_size == 1
    )


def shutdown_distributed(context: DistributedContext) -> None:
    if context.enabled and dist.is_initialized():
        dist.destroy_process_group()
