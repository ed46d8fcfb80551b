"""Optimizers the runner adds to torch's: Adam as Burda et al. (2016) ran it, and torch's RMSProp
updating large tensors block by block."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from vgp_bench.errors import ConfigError


class BurdaAdam(torch.optim.Optimizer):
    """Adam as the IWAE code of Burda et al. (2016) computes it (their `optimizers.Adam`).

    It differs from Kingma & Ba's Adam (torch.optim.Adam) in four ways, each kept here:
    - the second-moment estimates start at `initial_second_moment` (ones), not zeros;
    - `eps` (1e-4) is added to sqrt(v) and the bias correction is folded into the step size,
      alpha_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), with t counting from 1;
    - beta1 = 0.99 in their code (their paper says 0.9; the config states which it follows);
    - with `lagged=True`, the update of step t uses the moments *before* step t's gradient
      enters them: Theano evaluates every update of a step from the old values of its shared
      variables, so their parameter update reads m_{t-1} and v_{t-1} (the first step moves
      nothing, since m_0 = 0). `lagged=False` uses m_t and v_t as the textbook rule does.

    Their gradient is of the minibatch's *sum* of bounds, where the runner's objective is the
    mean: `gradient_scale` (the batch size, for their protocol) multiplies each gradient before
    it enters the moments. Adam is blind to that scale except through `eps` and the ones that v
    starts at, which is why it is kept.

    The step size `lr` may change between steps (the staged schedule); t keeps counting.
    `foreach` (None or True) runs each operation over all parameters at once, False one tensor
    at a time; the numbers are the same, and at the DLGMs' sizes all at once is the faster on
    CPU too (docs/performance.md).
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.99, 0.999),
        eps: float = 1e-4,
        initial_second_moment: float = 1.0,
        lagged: bool = True,
        gradient_scale: float = 1.0,
        foreach: bool | None = None,
    ) -> None:
        if lr <= 0 or eps < 0 or initial_second_moment < 0 or gradient_scale <= 0:
            raise ConfigError(
                "BurdaAdam needs lr > 0, eps >= 0, initial_second_moment >= 0 and "
                f"gradient_scale > 0, got lr={lr}, eps={eps}, "
                f"initial_second_moment={initial_second_moment}, gradient_scale={gradient_scale}"
            )
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"BurdaAdam needs betas in [0, 1), got {list(betas)}")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "initial_second_moment": initial_second_moment,
            "lagged": lagged,
            "gradient_scale": gradient_scale,
            "foreach": foreach,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        """One update of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.full_like(
                        p, float(group["initial_second_moment"]),
                        memory_format=torch.preserve_format,
                    )  # fmt: skip
            beta1, beta2 = group["betas"]
            timestep = float(self.state[params[0]]["step"]) + 1.0  # t from 1, shared by all
            step_size = (
                float(group["lr"]) * math.sqrt(1.0 - beta2**timestep) / (1.0 - beta1**timestep)
            )
            foreach = group.get("foreach") is not False  # absent from older checkpoints
            scale = float(group.get("gradient_scale", 1.0))
            settings = (beta1, beta2, step_size, float(group["eps"]), scale, bool(group["lagged"]))
            if foreach:
                self._update(params, [self.state[p] for p in params], *settings)
            else:
                for p in params:
                    self._update([p], [self.state[p]], *settings)
        return loss

    @classmethod
    def _update(
        cls,
        params: list[Tensor],
        states: list[dict],
        beta1: float,
        beta2: float,
        step_size: float,
        eps: float,
        gradient_scale: float,
        lagged: bool,
    ) -> None:
        """One step of `params` (each with a gradient) and their states, as one multi-tensor
        operation per formula: called with all parameters or with one at a time."""
        grads = [p.grad for p in params]
        if gradient_scale != 1.0:
            grads = torch._foreach_mul(grads, gradient_scale)
        first = [s["exp_avg"] for s in states]  # m
        second = [s["exp_avg_sq"] for s in states]  # v
        if lagged:
            cls._move(params, first, second, step_size, eps)
        torch._foreach_mul_(first, beta1)
        torch._foreach_add_(first, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(second, beta2)
        torch._foreach_addcmul_(second, grads, grads, value=1.0 - beta2)
        if not lagged:
            cls._move(params, first, second, step_size, eps)
        for s in states:
            s["step"] += 1.0

    @staticmethod
    def _move(
        params: list[Tensor],
        first: list[Tensor],
        second: list[Tensor],
        step_size: float,
        eps: float,
    ) -> None:
        """theta -= step_size * m / (sqrt(v) + eps): descent on the loss (their code ascends
        the bound with the bound's gradient, the same move)."""
        denominators = torch._foreach_sqrt(second)
        torch._foreach_add_(denominators, eps)
        torch._foreach_addcdiv_(params, first, denominators, value=-step_size)


class RMSprop(torch.optim.RMSprop):
    """torch.optim.RMSprop whose plain update (no momentum, not centered) of a large CPU tensor
    (over `blocked_above` entries) runs block by block, so each block's five elementwise passes
    stay in the CPU's cache, and of the smaller tensors all at once (a foreach call per
    operation instead of a Python call per tensor and operation; make bench's optimizer_update).

    Every element goes through the same operations in the same order as in torch's update, so
    the numbers are the same bit for bit (tests/test_rmsprop.py), and so are the state and its
    checkpoints: only the memory traffic differs. On a 15-million-entry layer (the paper's
    dense T(h) of the two-layer DLGM) the update takes about 0.6 of torch's time on one thread
    (docs/performance.md). Any other case
    (momentum, centered, maximize, weight decay, complex, a tensor off the CPU, foreach,
    differentiable or capturable) is torch's own step.
    """

    cpu_update_of_its_own = True  # the runner leaves `foreach` off on CPU (run/loop/build.py)
    block_size = 1 << 16  # elements a block: 256 KiB each of state, gradient, parameter and
    # the square root's buffer in float32
    blocked_above = 1 << 21  # a tensor of more entries (8 MiB in float32) goes in blocks, a
    # smaller one whole: blocks cost five calls each, and on dlgm1 (0.4 million entries in 12
    # tensors) blocking made the update 1.2x slower (1067 against 883 us, one thread)

    def _blockable(self) -> bool:
        """Whether every group takes the plain update on CPU tensors."""
        for group in self.param_groups:
            plain = not (
                group["momentum"] or group["centered"] or group["maximize"]
                or group["weight_decay"] or group["foreach"] or group["differentiable"]
                or group["capturable"]
            )  # fmt: skip
            on_cpu = all(param.is_cpu and not param.is_complex() for param in group["params"])
            if not (plain and on_cpu):
                return False
        return True

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        """One update of every parameter with a gradient (torch's update, in blocks)."""
        if not self._blockable():
            return torchs_step(self, closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            square_avgs: list[Tensor] = []
            steps: list[Tensor] = []
            if not self._gather_started(group, params, grads, square_avgs, steps):
                self._init_group(group, params, grads, square_avgs, [], [], steps)
            learning_rate = float(group["lr"])
            alpha, eps = group["alpha"], group["eps"]
            if steps:
                torch._foreach_add_(steps, 1)
            whole = [i for i, param in enumerate(params) if param.numel() <= self.blocked_above]
            if whole:  # every small tensor at once: five calls a step, not five a tensor
                rmsprop_update_all(
                    *([tensors[i] for i in whole] for tensors in (params, grads, square_avgs)),
                    alpha,
                    eps,
                    learning_rate,
                )
            for param, grad, square_avg in zip(params, grads, square_avgs, strict=True):
                if param.numel() > self.blocked_above:
                    for block in self._blocks(param, grad, square_avg):
                        rmsprop_update(*block, alpha, eps, learning_rate)
        return loss

    def _gather_started(
        self,
        group: dict,
        params: list[Tensor],
        grads: list[Tensor],
        square_avgs: list[Tensor],
        steps: list[Tensor],
    ) -> bool:
        """Fill the lists as torch's `_init_group` does, when every parameter with a gradient
        has its state already (every step but the first); False, lists untouched, otherwise."""
        found: list[tuple[Tensor, Tensor, dict]] = []
        for param in group["params"]:
            if param.grad is None:
                continue
            state = self.state.get(param)
            if not state or param.grad.is_sparse:  # a first step, or torch's own error
                return False
            found.append((param, param.grad, state))
        for param, grad, state in found:
            params.append(param)
            grads.append(grad)
            square_avgs.append(state["square_avg"])
            steps.append(state["step"])
        return True

    def _blocks(
        self, param: Tensor, grad: Tensor, square_avg: Tensor
    ) -> Iterable[tuple[Tensor, Tensor, Tensor]]:
        """The (param, grad, square_avg) blocks of one tensor: itself when small or strided."""
        size = param.numel()
        tensors = (param, grad, square_avg)
        if size <= self.blocked_above or not all(tensor.is_contiguous() for tensor in tensors):
            yield tensors
            return
        flat = [tensor.view(-1) for tensor in tensors]  # [P] each
        for start in range(0, size, self.block_size):
            yield tuple(tensor[start : start + self.block_size] for tensor in flat)  # type: ignore[misc]


def torchs_step(optimizer: RMSprop, closure=None):  # type: ignore[no-untyped-def]
    """torch.optim.RMSprop.step without the hook wrapper torch puts on every optimizer class's
    step: this class's own wrapper has run the step hooks already."""
    step = torch.optim.RMSprop.step
    if getattr(step, "hooked", False):
        step = step.__wrapped__  # type: ignore[attr-defined]
    return step(optimizer, closure)


def rmsprop_update(
    param: Tensor, grad: Tensor, square_avg: Tensor, alpha: float, eps: float, lr: float
) -> None:
    """v <- alpha v + (1 - alpha) g^2; theta <- theta - lr g / (sqrt(v) + eps), in place, in
    torch's order of operations."""
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    average = square_avg.sqrt().add_(eps)
    param.addcdiv_(grad, average, value=-lr)


def rmsprop_update_all(
    params: list[Tensor],
    grads: list[Tensor],
    square_avgs: list[Tensor],
    alpha: float,
    eps: float,
    lr: float,
) -> None:
    """rmsprop_update of every tensor of the lists, one foreach call per operation (on the CPU
    the same kernels per tensor, without a Python call for each)."""
    torch._foreach_mul_(square_avgs, alpha)
    torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
    averages = torch._foreach_sqrt(square_avgs)
    torch._foreach_add_(averages, eps)
    torch._foreach_addcdiv_(params, grads, averages, value=-lr)
