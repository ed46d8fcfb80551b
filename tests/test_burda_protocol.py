"""Burda et al.'s (2016) training protocol as the runner's config items: their Adam, the
staged step sizes, the output-bias start, Glorot initialisation, exp scales, no shuffling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.helpers import TINY, compose_config, total_stage_epochs
from vgp_bench.data.base import ImageSplit
from vgp_bench.distributions import positive_scale
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.models.dlgm import DLGM
from vgp_bench.optimizers import BurdaAdam
from vgp_bench.run.loop.build import build_components
from vgp_bench.schedules import burda_stages, stage_of_epoch


def theano_adam_reference(
    theta: np.ndarray, gradients: list[np.ndarray], step_sizes: list[float]
) -> np.ndarray:
    """Their `optimizers.Adam` transcribed: every update of a step is computed from the old
    values of the shared variables (t from 1, m from zeros, v from ones), ascending the bound;
    `gradients` are the bound's, so their update is theta + alpha m / (sqrt(v) + 1e-4)."""
    beta1, beta2 = 0.99, 0.999
    first, second, timestep = np.zeros_like(theta), np.ones_like(theta), 1.0
    for gradient, learning_rate in zip(gradients, step_sizes, strict=True):
        alpha = learning_rate * math.sqrt(1 - beta2**timestep) / (1 - beta1**timestep)
        new_theta = theta + alpha * first / (np.sqrt(second) + 1e-4)
        first = beta1 * first + (1 - beta1) * gradient
        second = beta2 * second + (1 - beta2) * gradient**2
        theta, timestep = new_theta, timestep + 1
    return theta


def test_burda_adam_follows_their_theano_update_with_a_changing_step_size() -> None:
    generator = np.random.default_rng(0)
    start = generator.normal(size=7)
    bound_gradients = [generator.normal(size=7) * 3 for _ in range(40)]
    step_sizes = [1e-3] * 10 + [7.2e-4] * 30  # a stage change keeps t and the moments
    parameter = torch.nn.Parameter(torch.tensor(start, dtype=torch.float64))
    optimizer = BurdaAdam([parameter])
    for gradient, step_size in zip(bound_gradients, step_sizes, strict=True):
        optimizer.param_groups[0]["lr"] = step_size
        parameter.grad = -torch.tensor(gradient)  # the runner descends the negative bound
        optimizer.step()
    expected = theano_adam_reference(start, bound_gradients, step_sizes)
    torch.testing.assert_close(parameter.detach(), torch.tensor(expected), rtol=1e-12, atol=0)
    assert float(optimizer.state[parameter]["step"]) == 40


def test_burda_adam_first_step_moves_nothing_when_lagged_and_does_when_not() -> None:
    for lagged, moves in ((True, False), (False, True)):
        parameter = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
        optimizer = BurdaAdam([parameter], lagged=lagged)
        parameter.grad = torch.full((3,), 2.0, dtype=torch.float64)
        optimizer.step()
        assert bool((parameter.detach() != 1.0).all()) is moves


def test_burda_adam_gradient_scale_is_the_gradient_of_the_batch_sum() -> None:
    """gradient_scale = B on the batch's mean bound is their update on the batch's sum."""
    data = torch.randn(20, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    trajectories = []
    for scale, reduce in ((20.0, torch.mean), (1.0, torch.sum)):
        weights = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))
        optimizer = BurdaAdam([weights], gradient_scale=scale)
        for _ in range(25):
            optimizer.zero_grad()
            reduce((data @ weights - 1.0) ** 2).backward()
            optimizer.step()
        trajectories.append(weights.detach().clone())
    torch.testing.assert_close(trajectories[0], trajectories[1], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "arguments", [{"lr": 0.0}, {"eps": -1.0}, {"betas": (1.0, 0.9)}, {"gradient_scale": 0.0}]
)
def test_burda_adam_refuses_bad_settings(arguments: dict) -> None:
    with pytest.raises(ValueError, match="BurdaAdam needs"):
        BurdaAdam([torch.nn.Parameter(torch.zeros(1))], **arguments)


def test_burda_stages_give_their_step_sizes_for_3_to_the_i_epochs() -> None:
    assert total_stage_epochs() == 3280
    stage_starts = [0, 1, 4, 13, 40, 121, 364, 1093]  # epoch (0-based) where stage i begins
    assert [stage_of_epoch(epoch, 8) for epoch in stage_starts] == list(range(8))
    assert [stage_of_epoch(epoch - 1, 8) for epoch in stage_starts[1:]] == list(range(7))
    assert stage_of_epoch(5000, 8) == 7  # past the end: the last stage
    factors = [burda_stages(epoch * 10, steps_per_epoch=10) for epoch in stage_starts]
    expected = [round(10 ** (1 - i / 7), 1) for i in range(8)]
    assert factors == expected == [10.0, 7.2, 5.2, 3.7, 2.7, 1.9, 1.4, 1.0]


def test_the_runner_fills_in_the_schedules_epoch_length() -> None:
    cfg = compose_config([*TINY, "optim=burda_adam"])  # 64 images, batch 16: 4 steps an epoch
    parts = build_components(cfg)
    assert isinstance(parts.optimizer, BurdaAdam)
    for step, factor in ((0, 10.0), (3, 10.0), (4, 7.2), (15, 7.2), (16, 5.2)):
        parts.schedule.apply(step)
        assert parts.schedule.current() == pytest.approx(1e-4 * factor, rel=1e-12)


def test_output_bias_starts_at_the_logits_of_the_clipped_training_mean() -> None:
    model = DLGM((1, 2, 2), latent_dims=[3], hidden_dims=[[4]], output_bias="train_mean")
    means = torch.tensor([[[0.0, 0.25], [0.5, 1.0]]])
    model.start_from_data(means)
    expected = torch.logit(torch.tensor([0.001, 0.25, 0.5, 0.999]))
    torch.testing.assert_close(model.likelihood_net[-1].bias.detach(), expected)
    untouched = DLGM((1, 2, 2), latent_dims=[3], hidden_dims=[[4]])
    before = untouched.likelihood_net[-1].bias.detach().clone()
    untouched.start_from_data(means)
    assert torch.equal(untouched.likelihood_net[-1].bias.detach(), before)


def test_pixel_means_are_bernoulli_probabilities() -> None:
    grey = torch.tensor([[[[0, 255], [51, 102]]], [[[255, 255], [0, 0]]]], dtype=torch.uint8)
    dynamic = ImageSplit(grey, dynamic=True).pixel_means()
    torch.testing.assert_close(dynamic, torch.tensor([[[0.5, 1.0], [0.1, 0.2]]]))
    binary = ImageSplit((grey > 100).to(torch.uint8)).pixel_means()
    torch.testing.assert_close(binary, torch.tensor([[[0.5, 1.0], [0.0, 0.5]]]))


def test_glorot_uniform_init_bounds_the_weights_and_zeroes_the_biases() -> None:
    torch.manual_seed(0)
    model = DLGM((1, 28, 28), latent_dims=[50], hidden_dims=[[200, 200]], init="glorot_uniform")
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(layers) == 5  # features 784-200-200, likelihood 50-200-200-784
    for layer in layers:
        fan_out, fan_in = layer.weight.shape
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        largest = float(layer.weight.detach().abs().max())
        assert 0.9 * bound < largest <= bound  # drawn over the whole range, not beyond
        assert not layer.bias.any()
    with pytest.raises(ValueError, match=r"model\.init"):
        DLGM((1, 2, 2), latent_dims=[3], hidden_dims=[[4]], init="orthogonal")


def test_exp_scale_link_in_the_model_and_the_head() -> None:
    raw = torch.tensor([-3.0, 0.0, 2.0])
    torch.testing.assert_close(positive_scale(raw, 0.0, "exp"), torch.exp(raw))
    torch.testing.assert_close(positive_scale(raw, 1e-4), torch.nn.functional.softplus(raw) + 1e-4)
    head = MeanFieldHead(DLGM((1, 2, 2), [3], [[4]]).sites["z"], scale_link="exp", min_scale=0.0)
    context = torch.randn(5, 4)
    mean, raw_scale = head.parameter_net(context).chunk(2, dim=-1)
    sample = head(context, 2, torch.Generator().manual_seed(0))
    noise = (sample.z - mean) / torch.exp(raw_scale)  # [2, 5, 3]
    log_q = -0.5 * (noise.pow(2) + math.log(2 * math.pi)).sum(-1) - raw_scale.sum(-1)
    torch.testing.assert_close(sample.log_q, log_q, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"inference\.scale_link"):
        MeanFieldHead(DLGM((1, 2, 2), [3], [[4]]).sites["z"], scale_link="relu")


def test_no_shuffling_keeps_the_stored_order_every_epoch() -> None:
    split = ImageSplit(torch.zeros(10, 1, 2, 2, dtype=torch.uint8))
    for epoch in (0, 1, 7):
        assert torch.equal(split.epoch_order(epoch, seed=3, shuffle=False), torch.arange(10))
    assert not torch.equal(split.epoch_order(0, seed=3), split.epoch_order(1, seed=3))


def test_the_burda_experiment_composes_as_their_code_runs() -> None:
    cfg = compose_config(["experiment=burda_dlgm1_vae"])
    assert cfg.dataset.binarization == "dynamic" and cfg.dataset.holdout == 400
    assert cfg.trainer.batch_size == 20 and cfg.trainer.shuffle is False
    assert cfg.trainer.epochs == total_stage_epochs() == 3280
    assert cfg.optim.optimizer.gradient_scale == 20 and list(cfg.optim.optimizer.betas) == [
        0.99,
        0.999,
    ]
    assert cfg.model.output_bias == "train_mean" and cfg.model.scale_link == "exp"
    assert cfg.eval.is_samples == 5000 and cfg.eval.subset is None
    assert cfg.eval.checkpoint == "auto" and cfg.trainer.early_stopping.patience is None


def flat(node: object, prefix: str = "") -> dict[str, object]:
    """A composed config as {dotted key: value}."""
    if isinstance(node, dict):
        items: dict[str, object] = {}
        for key, value in node.items():
            items |= flat(value, f"{prefix}{key}.")
        return items
    return {prefix[:-1]: node}


@pytest.mark.parametrize(
    ("experiment", "changes"),
    [
        ("burda_dlgm1_vgp", {"inference"}),
        ("burda_dlgm1_vgp_control", {"inference"}),
        ("burda_dlgm2_vae", {"model.latent_dims", "model.hidden_dims", "model.name"}),
    ],
)
def test_the_calibrated_rows_change_only_their_inference_or_model(
    experiment: str, changes: set[str]
) -> None:
    """Every key of the protocol (data, training, optimizer, evaluation) is the VAE's."""
    from omegaconf import OmegaConf

    def keys(name: str) -> dict[str, object]:
        container = OmegaConf.to_container(compose_config([f"experiment={name}"]), resolve=True)
        return flat(container)

    protocol, row = keys("burda_dlgm1_vae"), keys(experiment)
    differing = {
        key
        for key in protocol.keys() | row.keys()
        if protocol.get(key) != row.get(key) and key != "experiment_name"
    }
    assert differing and all(any(k.startswith(c) for c in changes) for k in differing), differing


def test_the_calibrated_vgp_takes_the_vaes_init_and_scale_link_and_its_control_drops_the_gp():
    vgp = compose_config(["experiment=burda_dlgm1_vgp"]).inference
    assert (vgp.name, vgp.warp, vgp.init, vgp.scale_link, vgp.min_scale) == (
        "vgp",
        "gp",
        "glorot_uniform",
        "exp",
        0.0,
    )
    control = compose_config(["experiment=burda_dlgm1_vgp_control"]).inference
    assert control.warp == "linear" and control.init == "glorot_uniform"


def test_the_vgp_head_starts_its_vae_layers_glorot_and_makes_its_scales_by_exp() -> None:
    from vgp_bench.inference.vgp import VGPHead

    site = DLGM((1, 2, 2), [3], [[4]]).sites["z"]
    torch.manual_seed(0)
    head = VGPHead(
        site, variational_data_size=6, init="glorot_uniform", scale_link="exp", min_scale=0.0
    )
    prior_mean = head.parts.prior_mean
    for layer in (prior_mean.location_net, prior_mean.warp_scale_net):
        fan_out, fan_in = layer.weight.shape
        assert float(layer.weight.detach().abs().max()) <= math.sqrt(6.0 / (fan_in + fan_out))
        assert not layer.bias.any()
    torch.manual_seed(0)
    default = VGPHead(site, variational_data_size=6, min_scale=0.0)
    glorot_r = dict(head.auxiliary.named_parameters())
    for name, parameter in default.auxiliary.named_parameters():  # r keeps its own start
        assert torch.equal(parameter, glorot_r[name])
    data = head.prepare(torch.randn(5, 4, dtype=torch.float32))
    raw = prior_mean.warp_scale_net(head.feature_net(data.context))
    torch.testing.assert_close(data.warp_scale, torch.exp(raw))
    with pytest.raises(ValueError, match=r"inference\.scale_link"):
        VGPHead(site, variational_data_size=6, scale_link="relu")
    with pytest.raises(ValueError, match=r"inference\.init"):
        VGPHead(site, variational_data_size=6, init="orthogonal")


def test_burda_adam_per_tensor_and_multi_tensor_updates_agree_bit_for_bit() -> None:
    """One tensor at a time computes what the multi-tensor update (the default) does."""
    trajectories = []
    for foreach in (True, False):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
        optimizer = BurdaAdam(net.parameters(), gradient_scale=20.0, foreach=foreach)
        inputs = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
        for _ in range(12):
            optimizer.zero_grad()
            net(inputs).pow(2).mean().backward()
            optimizer.step()
        trajectories.append([p.detach().clone() for p in net.parameters()])
    for left, right in zip(*trajectories, strict=True):
        assert torch.equal(left, right)


def test_an_older_checkpoint_without_foreach_resumes_with_this_process_choice() -> None:
    parameter = torch.nn.Parameter(torch.ones(3))
    optimizer = BurdaAdam([parameter], foreach=False)
    parameter.grad = torch.ones(3)
    optimizer.step()
    saved = optimizer.state_dict()
    del saved["param_groups"][0]["foreach"]  # as written before the option existed
    restored = BurdaAdam([parameter])
    restored.load_state_dict(saved)
    parameter.grad = torch.ones(3)
    restored.step()  # reads the missing key as None: all tensors at once
    assert float(restored.state[parameter]["step"]) == 2
