"""Floors of a training step: what its dense linear algebra and its update alone cost, here.

A step cannot run faster than its matrix products, Cholesky factorizations and triangular
solves (forward and backward) plus the optimizer's pass over the parameters. The recorder below
notes each such operator a step dispatches, with its shapes and strides; replaying them alone on
fresh tensors, on the same threads, gives the step's floor, so (time - floor) / floor is the
part of a step that is overhead (elementwise passes, allocation, Python) rather than arithmetic.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten

MATMULS = (aten.mm, aten.addmm, aten.bmm, aten.baddbmm)
FACTORIZATIONS = (aten.linalg_cholesky_ex,)
SOLVES = (aten.linalg_solve_triangular, aten.triangular_solve)
RECORDED = (*MATMULS, *FACTORIZATIONS, *SOLVES)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(
    function: Callable[[], Any], repeats: int, device: torch.device, warmup: int = 1
) -> list[float]:
    """Wall seconds of each of `repeats` calls (after `warmup` calls), synchronized."""
    for _ in range(warmup):
        function()
    synchronize(device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return times


def median_ms(times: Sequence[float]) -> float:
    return 1000 * statistics.median(times)


def machine_matmul_gflops(
    device: torch.device, size: int = 1024, repeats: int = 7, dtype: torch.dtype = torch.float32
) -> float:
    """Measured GFLOP/s of one large square matmul (the machine's practical peak)."""
    generator = torch.Generator(device=device).manual_seed(0)
    left = torch.randn(size, size, generator=generator, device=device, dtype=dtype)
    right = torch.randn(size, size, generator=generator, device=device, dtype=dtype)
    times = seconds_per_call(lambda: left @ right, repeats, device, warmup=2)
    return 2 * size**3 / statistics.median(times) / 1e9


def _cholesky_flops(matrix_shape, *args, out_shape=None, **kwargs) -> int:
    """n^3 / 3 multiply-adds, counted as 2 FLOPs each, per matrix."""
    *batch, n, _ = matrix_shape
    count = 1
    for size in batch:
        count *= size
    return count * (2 * n**3) // 3


def _solve_flops(first_shape, second_shape, *args, out_shape=None, **kwargs) -> int:
    """n^2 k multiply-adds per system, the triangle `[..., n, n]` against `[..., n, k]`."""
    triangle, right = (
        (first_shape, second_shape)
        if first_shape[-1] == first_shape[-2]
        else (second_shape, first_shape)
    )
    n = triangle[-1]
    k = right[-1] if right[-2] == n else right[-2]
    count = 1
    for size in torch.broadcast_shapes(tuple(triangle[:-2]), tuple(right[:-2])):
        count *= size
    return count * n * n * k


LINALG_FLOPS = {
    aten.linalg_cholesky_ex: _cholesky_flops,
    aten.linalg_solve_triangular: _solve_flops,
    aten.triangular_solve: _solve_flops,
}


def count_flops(function: Callable[[], Any]) -> int:
    """FLOPs of one call (matmuls by torch's FlopCounterMode, Cholesky and solves added)."""
    with FlopCounterMode(display=False, custom_mapping=LINALG_FLOPS) as counter:
        function()
    return int(counter.get_total_flops())


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    role: str  # "plain", "spd" (to factorize) or "triangle" (to solve against)


@dataclass(frozen=True)
class RecordedCall:
    op: Any
    args: tuple
    kwargs: dict


class LinearAlgebraRecorder(TorchDispatchMode):
    """Notes every matmul, Cholesky and triangular solve dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[RecordedCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in RECORDED:
            special = SPECIAL_ARGUMENT.get(packet)
            specs = tuple(
                _spec(value, SPECIAL_ROLE[packet] if position == special else "plain")
                for position, value in enumerate(args)
            )
            self.calls.append(RecordedCall(func, specs, dict(kwargs)))
        return func(*args, **kwargs)


# which positional argument must be well conditioned, and how
SPECIAL_ARGUMENT = {
    aten.linalg_cholesky_ex: 0,
    aten.linalg_solve_triangular: 0,
    aten.triangular_solve: 1,  # (B, A)
}
SPECIAL_ROLE = {
    aten.linalg_cholesky_ex: "spd",
    aten.linalg_solve_triangular: "triangle",
    aten.triangular_solve: "triangle",
}


def _spec(value: Any, role: str) -> Any:
    if not isinstance(value, Tensor):
        return value
    return TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype, role)


def _materialize(spec: Any, device: torch.device, generator: torch.Generator) -> Any:
    """A tensor of `spec`'s layout whose values suit its role (well-conditioned)."""
    if not isinstance(spec, TensorSpec):
        return spec
    extent = sum((size - 1) * stride for size, stride in zip(spec.shape, spec.stride, strict=True))
    tensor = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device=device)
    if not tensor.numel():
        return tensor
    if spec.role == "plain" or len(spec.shape) < 2 or spec.shape[-1] != spec.shape[-2]:
        flat = torch.randn(extent + 1, generator=generator, device=device)
        return torch.as_strided(flat.to(spec.dtype), spec.shape, spec.stride)
    n = spec.shape[-1]
    identity = torch.eye(n, device=device, dtype=spec.dtype)
    noise = 0.1 * torch.randn(spec.shape, generator=generator, device=device).to(spec.dtype)
    if spec.role == "spd":  # symmetric, diagonally dominant
        value = noise @ noise.transpose(-1, -2) / n + identity
    else:  # both triangles well conditioned
        value = noise / n + identity
    tensor.copy_(value)
    return tensor


def replay_seconds(
    calls: Sequence[RecordedCall], device: torch.device, repeats: int = 5
) -> list[float]:
    """Seconds per pass of running the recorded operators alone, on fresh tensors."""
    generator = torch.Generator(device=device).manual_seed(0)
    prepared = [
        (
            call.op,
            [_materialize(arg, device, generator) for arg in call.args],
            call.kwargs,
        )
        for call in calls
    ]

    def run() -> None:
        for op, args, kwargs in prepared:
            op(*args, **kwargs)

    return seconds_per_call(run, repeats, device, warmup=1)


def update_seconds(
    optimizer: torch.optim.Optimizer, device: torch.device, repeats: int = 5
) -> list[float]:
    """Seconds of one optimizer update on copies of its parameters (gradients set once).

    The copies leave the real parameters and optimizer state untouched.
    """
    groups = optimizer.param_groups
    copies = [
        torch.nn.Parameter(parameter.detach().clone())
        for group in groups
        for parameter in group["params"]
    ]
    for copy in copies:
        copy.grad = torch.randn_like(copy) * 1e-3
    defaults = {key: value for key, value in optimizer.defaults.items() if key != "params"}
    defaults["lr"] = float(groups[0]["lr"])
    twin = type(optimizer)(copies, **defaults)
    return seconds_per_call(twin.step, repeats, device, warmup=1)


def record_linear_algebra(function: Callable[[], Any]) -> list[RecordedCall]:
    """The matmuls, factorizations and solves one call of `function` dispatches."""
    recorder = LinearAlgebraRecorder()
    with recorder:
        function()
    return recorder.calls


def gp_core(m: int, c: int, queries: int, device: torch.device) -> Callable[[], None]:
    """The VGP's unavoidable algebra: Cholesky of an m x m kernel matrix and the two triangular
    solves against `queries` columns, forward and backward (Eq. 4)."""
    generator = torch.Generator(device=device).manual_seed(0)
    base = torch.randn(m, m, generator=generator, device=device) / m**0.5
    spd = (base @ base.T + torch.eye(m, device=device)).requires_grad_()
    cross = torch.randn(m, queries, generator=generator, device=device).requires_grad_()

    def step() -> None:
        factor = torch.linalg.cholesky_ex(spd).L
        projection = torch.linalg.solve_triangular(factor, cross, upper=False)
        weights = torch.linalg.solve_triangular(factor.mT, projection, upper=True)
        (weights.sum() + projection.pow(2).sum()).backward()

    return step


def solves_only(m: int, queries: int, device: torch.device) -> Callable[[], None]:
    """The two triangular solves of Eq. 4 against `queries` columns, forward and backward,
    with the factor given (DRAW reuses one factor for all its steps)."""
    generator = torch.Generator(device=device).manual_seed(0)
    factor = torch.eye(m, device=device) + torch.randn(
        m, m, generator=generator, device=device
    ).tril(-1) / (10 * m)
    factor.requires_grad_()
    cross = torch.randn(m, queries, generator=generator, device=device).requires_grad_()

    def step() -> None:
        projection = torch.linalg.solve_triangular(factor, cross, upper=False)
        weights = torch.linalg.solve_triangular(factor.mT, projection, upper=True)
        (weights.sum() + projection.pow(2).sum()).backward()

    return step


def linear_layer(in_dim: int, out_dim: int, batch: int, device: torch.device) -> Callable[[], None]:
    """A linear layer's matmuls, forward and backward (weight and input gradients)."""
    layer = torch.nn.Linear(in_dim, out_dim, device=device)
    inputs = torch.randn(batch, in_dim, device=device, requires_grad=True)

    def step() -> None:
        layer.zero_grad(set_to_none=False)
        layer(inputs).sum().backward()

    return step
