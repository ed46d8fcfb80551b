"""A GPU time estimate from a CPU run: the kernels a step would launch and the work of each,
priced by a launch-and-roofline model of one GPU (`scripts/reproduction_costs.py`).

No GPU has been measured for most rows, so this is a model, and it says so wherever it is
printed. Each aten operator the CPU run dispatches is one kernel on the GPU (views and
allocations are none; `.item()` is a kernel and a host sync). An eager step on a GPU takes at
least the host's time to issue its kernels (kernels x a per-operator host cost) and at least
the device's time to run them (each kernel at least `min_kernel_seconds`, else its FLOPs or its
bytes at the achieved fraction of the GPU's peak, whichever is longer). The estimate is the
range between perfect overlap of the two, max(host, device), and none, host + device (which
also covers the waits at host syncs, counted but not priced apart), with an assumed host cost
per operator at a fast and a slow host's (`GpuModel.host_seconds_per_kernel`). `make gpu-check`
on a GPU measures the real steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten

# operators that allocate or re-describe memory and launch no kernel on a GPU
NO_KERNEL = {
    aten.empty.memory_format,
    aten.empty_strided.default,
    aten.empty_like.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.detach.default,
    aten.alias.default,
    aten.lift_fresh.default,
    aten.set_.source_Storage_storage_offset,
    aten.resize_.default,
    aten._unsafe_view.default,
}
HOST_SYNC = {
    aten._local_scalar_dense.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._linalg_check_errors.default,
}


@dataclass(frozen=True)
class GpuModel:
    """The GPU an estimate prices kernels on: one H200 SXM (NVIDIA's data sheet), fp32."""

    name: str = "H200 SXM, fp32"
    # FP32 without tensor cores: torch's default for an fp32 matrix product
    peak_flops_per_second: float = 67e12
    peak_bytes_per_second: float = 4.8e12  # HBM3e bytes/s
    achieved_fraction: float = 0.5  # of either peak, by a kernel large enough to reach it
    min_kernel_seconds: float = 3e-6  # the shortest a kernel occupies the device
    # assumed, not measured: eager PyTorch's Python, dispatcher, autograd and launch cost of
    # one operator on a fast and on a slow host
    host_seconds_per_kernel: tuple[float, float] = (5e-6, 20e-6)

    def kernel_seconds(self, flops: float, bytes_moved: float) -> float:
        """Device seconds of one kernel: its roofline time, at least the shortest kernel."""
        return max(
            self.min_kernel_seconds,
            flops / (self.peak_flops_per_second * self.achieved_fraction),
            bytes_moved / (self.peak_bytes_per_second * self.achieved_fraction),
        )


@dataclass
class KernelTrace:
    """The kernels of some work: their count, host syncs, and each kernel's FLOPs and bytes."""

    kernels: int = 0
    host_syncs: int = 0
    flops: list[float] = field(default_factory=list)
    bytes_moved: list[float] = field(default_factory=list)

    def add(self, flops: float, bytes_moved: float, sync: bool) -> None:
        """Record one kernel."""
        self.kernels += 1
        self.host_syncs += int(sync)
        self.flops.append(flops)
        self.bytes_moved.append(bytes_moved)

    def device_seconds(self, gpu: GpuModel) -> float:
        """Seconds the device is busy running every kernel once."""
        return sum(map(gpu.kernel_seconds, self.flops, self.bytes_moved))

    def summary(self, gpu: GpuModel) -> dict[str, Any]:
        """Counts, totals and the estimated seconds (low, high) of running the work once."""
        low, high = estimated_seconds(self, gpu)
        return {
            "kernels": self.kernels,
            "host_syncs": self.host_syncs,
            "gflops": round(sum(self.flops) / 1e9, 4),
            "gbytes": round(sum(self.bytes_moved) / 1e9, 4),
            "device_ms": round(1000 * self.device_seconds(gpu), 4),
            "estimated_ms": [round(1000 * low, 4), round(1000 * high, 4)],
        }


def estimated_seconds(trace: KernelTrace, gpu: GpuModel) -> tuple[float, float]:
    """(low, high) GPU seconds of the traced work: host and device overlapped at the fast host's
    cost per kernel, and one after the other at the slow host's."""
    device = trace.device_seconds(gpu)
    fast_host, slow_host = (trace.kernels * cost for cost in gpu.host_seconds_per_kernel)
    return max(fast_host, device), slow_host + device


def tensors_in(values: Any) -> list[torch.Tensor]:
    """The tensors in a nest of arguments or results."""
    leaves, _ = tree_flatten(values)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def tensors_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the tensors (the viewed elements only)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def operator_flops(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, outputs: list[torch.Tensor]
) -> float:
    """FLOPs of one operator: torch's formula where it has one (matrix products,
    convolutions), else one per element of its output tensors `outputs`."""
    formula = flop_registry.get(func.overloadpacket)
    if formula is not None:
        return float(formula(*args, **kwargs, out_val=out))
    return float(sum(tensor.numel() for tensor in outputs))


def launches_kernel(func: Any) -> bool:
    """Whether an operator runs a kernel on a GPU (views, allocations and the profiler's marks
    do not)."""
    return not (func.is_view or func in NO_KERNEL or func.namespace == "profiler")


class KernelCounter(TorchDispatchMode):
    """Records every operator dispatched under it into a KernelTrace (backward and optimizer
    included, when they run on this thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.trace = KernelTrace()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if launches_kernel(func):
            outputs = tensors_in(out)  # flattened once for the FLOPs and the bytes
            self.trace.add(
                operator_flops(func, args, kwargs, out, outputs),
                float(tensors_bytes(tensors_in((args, kwargs))) + tensors_bytes(outputs)),
                func in HOST_SYNC,
            )
        return out


def trace_of(work: Callable[[], Any]) -> KernelTrace:
    """The kernels `work()` dispatches."""
    with KernelCounter() as counter:
        work()
    return counter.trace


def trace_training_step(trainer: Any) -> KernelTrace:
    """The kernels of one step of the real loop (a step first, untraced: lazy state), with
    torch's optimizers switched to the multi-tensor update a GPU run takes by default."""
    from vgp_bench.benchmarks.overhead import run_steps

    run_steps(trainer, 1)
    groups = trainer.parts.optimizer.param_groups
    saved = [group.get("foreach") for group in groups]
    for group in groups:
        if "foreach" in group:
            group["foreach"] = True
    try:
        return trace_of(lambda: run_steps(trainer, 1))
    finally:
        for group, foreach in zip(groups, saved, strict=True):
            if "foreach" in group:
                group["foreach"] = foreach
