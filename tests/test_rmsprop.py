"""vgp_bench.optimizers.RMSprop: torch's RMSProp bit for bit, its plain update in blocks."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from vgp_bench.optimizers import RMSprop
from vgp_bench.run.runtime import compose_config
from vgp_bench.schedules import paper_decay

# shapes around the block size used below (64): smaller, equal, one over, many blocks and a
# ragged last block, and a scalar
SHAPES = [(5, 7), (64,), (65,), (13, 29), (3, 4, 25), ()]
BLOCK = 64


def parameters(dtype: torch.dtype = torch.float32) -> list[nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    return [nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype)) for shape in SHAPES]


def train(
    make: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    steps: int = 12,
    dtype: torch.dtype = torch.float32,
) -> tuple[list[torch.Tensor], dict]:
    """`steps` updates from seeded gradients under the paper's decaying step size."""
    params = parameters(dtype)
    optimizer = make(params)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: paper_decay(step, epsilon=0.01, time_scale=3.0)
    )
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator, dtype=dtype)
        if step == 3:
            params[1].grad = None  # a parameter without a gradient this step is left alone
        optimizer.step()
        schedule.step()
    return [param.detach().clone() for param in params], optimizer.state_dict()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RMSprop, "block_size", BLOCK)


def blocked(**options: object) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer]:
    return lambda params: RMSprop(params, lr=1e-2, alpha=0.95, eps=1e-6, **options)  # type: ignore[arg-type]


def torchs(**options: object) -> Callable[[list[nn.Parameter]], torch.optim.Optimizer]:
    return lambda params: torch.optim.RMSprop(params, lr=1e-2, alpha=0.95, eps=1e-6, **options)  # type: ignore[arg-type]


def assert_same(
    ours: tuple[list[torch.Tensor], dict], theirs: tuple[list[torch.Tensor], dict]
) -> None:
    for mine, other in zip(ours[0], theirs[0], strict=True):
        assert torch.equal(mine, other)
    for index, state in theirs[1]["state"].items():
        assert state.keys() == ours[1]["state"][index].keys()
        for name, value in state.items():
            assert torch.equal(ours[1]["state"][index][name], value), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_blocked_update_is_torchs_bit_for_bit(small_blocks: None, dtype: torch.dtype) -> None:
    ours, theirs = train(blocked(), dtype=dtype), train(torchs(), dtype=dtype)
    assert_same(ours, theirs)
    assert not torch.equal(ours[0][2], parameters(dtype)[2])  # it moved


@pytest.mark.parametrize(
    "options", [{"momentum": 0.9}, {"centered": True}, {"weight_decay": 0.1}, {"maximize": True}]
)
def test_other_options_take_torchs_own_step(small_blocks: None, options: dict) -> None:
    assert_same(train(blocked(**options)), train(torchs(**options)))


def test_a_torch_checkpoint_resumes_in_the_blocked_optimizer(small_blocks: None) -> None:
    """A run saved by torch.optim.RMSprop (older run folders) goes on exactly."""
    params_straight, params_switched = parameters(), parameters()
    straight = torch.optim.RMSprop(params_straight, lr=1e-2, alpha=0.95, eps=1e-6)
    switched: torch.optim.Optimizer = torch.optim.RMSprop(
        params_switched, lr=1e-2, alpha=0.95, eps=1e-6
    )
    generator = torch.Generator().manual_seed(2)
    for step in range(10):
        grads = [torch.randn(param.shape, generator=generator) for param in params_straight]
        if step == 5:  # torch's state saved, loaded into the blocked optimizer, and on
            state = switched.state_dict()
            switched = RMSprop(params_switched, lr=1e-2, alpha=0.95, eps=1e-6)
            switched.load_state_dict(state)
        for optimizer, params in ((straight, params_straight), (switched, params_switched)):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.clone()
            optimizer.step()
    for mine, other in zip(params_switched, params_straight, strict=True):
        assert torch.equal(mine, other)
    assert_same(([], switched.state_dict()), ([], straight.state_dict()))


def test_the_rmsprop_config_builds_the_blocked_optimizer() -> None:
    cfg = compose_config(["optim=rmsprop"])
    assert cfg.optim.optimizer._target_ == "vgp_bench.optimizers.RMSprop"
