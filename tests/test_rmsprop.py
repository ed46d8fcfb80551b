"""vgp_bench.optimizers.RMSprop: torch's RMSProp bit for bit, its plain update in blocks."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from vgp_bench.optimizers import RMSprop
from vgp_bench.run.config.store import compose_config
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
        if step == 0:
            params[2].grad = None  # its state starts with its first gradient, a step late
        if step == 3:
            params[1].grad = None  # a parameter without a gradient this step is left alone
        optimizer.step()
        schedule.step()
    return [param.detach().clone() for param in params], optimizer.state_dict()


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RMSprop, "block_size", BLOCK)
    monkeypatch.setattr(RMSprop, "blocked_above", BLOCK)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_whole_tensors_update_at_once_as_torchs_bit_for_bit(dtype: torch.dtype) -> None:
    """At the real sizes every tensor here is whole: one foreach call per operation."""
    assert_same(train(blocked(), dtype=dtype), train(torchs(), dtype=dtype))


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


def test_the_real_block_size_with_two_threads_and_a_tensor_step_size() -> None:
    """Tensors over several real blocks (and one not a multiple of the vector width), split
    across two threads, with the step size a tensor: torch's numbers."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        generator = torch.Generator().manual_seed(3)
        shapes = [(RMSprop.blocked_above + 3 * RMSprop.block_size + 17,), (411, 523)]
        runs = []
        for make in (RMSprop, torch.optim.RMSprop):
            params = [
                nn.Parameter(torch.randn(shape, generator=torch.Generator().manual_seed(4)))
                for shape in shapes
            ]
            optimizer = make(params, lr=torch.tensor(1e-3), alpha=0.95, eps=1e-6)
            generator.manual_seed(3)
            for _ in range(3):
                for param in params:
                    param.grad = torch.randn(param.shape, generator=generator)
                optimizer.step()
            runs.append(([param.detach().clone() for param in params], optimizer.state_dict()))
        assert_same(*runs)
    finally:
        torch.set_num_threads(threads)


def test_step_hooks_run_once_also_when_torchs_step_takes_over() -> None:
    for options in ({}, {"momentum": 0.9}):
        torch.optim.RMSprop([nn.Parameter(torch.zeros(1))])  # torch wraps its class's step
        param = nn.Parameter(torch.zeros(3))
        optimizer = RMSprop([param], lr=1e-2, **options)  # type: ignore[arg-type]
        calls: list[str] = []
        optimizer.register_step_pre_hook(lambda *_, calls=calls: calls.append("pre"))
        optimizer.register_step_post_hook(lambda *_, calls=calls: calls.append("post"))
        param.grad = torch.ones(3)
        optimizer.step()
        assert calls == ["pre", "post"], options
        assert torch.all(param != 0)


def test_the_rmsprop_config_builds_the_blocked_optimizer() -> None:
    from hydra.utils import instantiate

    cfg = compose_config(["optim=rmsprop"])
    assert cfg.optim.optimizer._target_ == "vgp_bench.optimizers.RMSprop"
    optimizer = instantiate(cfg.optim.optimizer)([nn.Parameter(torch.zeros(2))])
    assert type(optimizer) is RMSprop
    assert optimizer.defaults["alpha"] == cfg.optim.optimizer.alpha


def test_a_training_run_takes_the_same_steps_as_under_torchs_rmsprop(small_blocks: None) -> None:
    """The runner's own loop (a tiny VGP, all its tensors in several blocks) with either
    optimizer: the same parameters after a few steps."""
    from tests.helpers import TINY
    from vgp_bench.benchmarks.overhead import make_trainer, run_steps

    states = []
    for target in ("vgp_bench.optimizers.RMSprop", "torch.optim.RMSprop"):
        trainer = make_trainer(
            [*TINY, "inference=vgp", f"optim.optimizer._target_={target}"], data=[]
        )
        expected = RMSprop if target.startswith("vgp_bench") else torch.optim.RMSprop
        assert type(trainer.parts.optimizer) is expected
        run_steps(trainer, 4)
        states.append({**trainer.parts.model.state_dict(), **trainer.parts.heads.state_dict()})
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][name], states[1][name]) for name in states[0])
