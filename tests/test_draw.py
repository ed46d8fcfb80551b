"""DRAW through the site/head interface: shapes, gradients, bounds and figures."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from torch import Tensor, nn

from tests.helpers import compose_config, paper_form, varied_seed
from vgp_bench.distributions import bernoulli_log_prob
from vgp_bench.estimators import bound, importance_weighted_log_likelihood
from vgp_bench.inference.base import SiteSample, SiteSpec, VariationalHead, build_heads
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.models.draw import DRAW, figure_steps
from vgp_bench.run.commands.train import train

X_SHAPE = (1, 7, 6)  # non-square on purpose
SMALL = {"steps": 3, "read_size": 2, "write_size": 3, "encoder_size": 16, "decoder_size": 16}
VGP_SMALL = {**paper_form(), "variational_data_size": 8, "aux_hidden_dims": (16,)}
HEADS = {
    "mean_field": MeanFieldHead,
    "vgp_collapsed": lambda spec: VGPHead(spec, **VGP_SMALL),
    "vgp_hierarchical": lambda spec: VGPHead(spec, **VGP_SMALL, objective="hierarchical"),
}
# log q~ in terms of the heads' logged terms, each summed over the T steps
LOG_Q_FROM_TERMS = {
    "mean_field": lambda terms: terms["log_q_z"],
    "vgp_collapsed": lambda terms: terms["log_q_z"] + terms["log_q_xi"] - terms["log_r_xi"],
    "vgp_hierarchical": lambda terms: (
        terms["log_q_z"]
        + terms["log_q_f"]
        + terms["log_q_xi"]
        - terms["log_r_xi"]
        - terms["log_r_f"]
    ),
}
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "model" / "draw.yaml"


def small_draw(attention: bool = True, seed: int = 0) -> DRAW:
    torch.manual_seed(seed)
    return DRAW(X_SHAPE, attention=attention, z_dim=4, **SMALL)


def binary_images(batch: int, seed: int = 1) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.bernoulli(torch.full((batch, *X_SHAPE), 0.3), generator=generator)


class RecordingHead(VariationalHead):
    """Wraps a head and records the context shape of every call (test instrumentation)."""

    def __init__(self, spec: SiteSpec) -> None:
        super().__init__(spec)
        self.inner = MeanFieldHead(spec)
        self.context_shapes: list[tuple[int, ...]] = []

    def forward(
        self, context: Tensor, n_samples: int, generator: torch.Generator | None = None
    ) -> SiteSample:
        self.context_shapes.append(tuple(context.shape))
        return self.inner(context, n_samples, generator)


@pytest.mark.parametrize("attention", [True, False])
@pytest.mark.parametrize("head", sorted(HEADS))
def test_trace_shapes_gradients_and_bounds(head: str, attention: bool):
    model = small_draw(attention)
    torch.manual_seed(1)
    heads = build_heads(HEADS[head], model.sites)
    x = binary_images(3)
    trace = model(x, heads, n_samples=5, generator=torch.Generator().manual_seed(2))
    assert trace.log_p.shape == trace.log_q.shape == (5, 3)
    assert {"log_likelihood", "log_prior", "log_q_z"} <= set(trace.terms)
    assert all(term.shape == (5, 3) for term in trace.terms.values())
    # log p is the sum of its two terms as computed: exactly. log q~ is the sum over steps of
    # each step's combination of terms, LOG_Q_FROM_TERMS the combination of the terms' sums
    # over steps: equal up to rounding, checked in float64 below.
    log_p = trace.terms["log_likelihood"] + trace.terms["log_prior"]
    torch.testing.assert_close(trace.log_p, log_p, rtol=0, atol=0)
    assert (trace.terms["log_likelihood"] < 0).all()
    # each sample follows its own trajectory
    assert trace.terms["log_likelihood"].std(0).min() > 0
    log_weights = trace.log_weights.detach()
    assert torch.isfinite(log_weights).all()
    assert (importance_weighted_log_likelihood(log_weights) >= bound(log_weights)).all()

    (-bound(trace.log_weights).mean()).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name  # every network of DRAW is in the bound
    head_gradients = [parameter.grad for parameter in heads.parameters()]
    assert all(
        gradient is not None and torch.isfinite(gradient).all() for gradient in head_gradients
    )
    assert sum(gradient.abs().sum() for gradient in head_gradients) > 0
    # The two orders of summing the (at most) 5 T = 15 per-step values differ by at most 14 eps
    # times the sum of their magnitudes. In float32 that is 4e-6 at magnitudes 80, the scale of
    # assert_close's default tolerance. In float64 the tolerance, 1e-12 times the summed terms'
    # magnitudes, allows per-step values 300 times their sums (measured: 1e-16 of them).
    model = small_draw(attention).double()
    torch.manual_seed(1)
    heads = build_heads(HEADS[head], model.sites).double()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(varied_seed(2))
        trace = model(x.double(), heads, n_samples=5, generator=generator)
    tolerance = 1e-12 * sum(term.abs() for term in trace.terms.values()).max().item()
    torch.testing.assert_close(
        trace.log_q, LOG_Q_FROM_TERMS[head](trace.terms), rtol=0, atol=tolerance
    )


def test_head_is_called_once_per_step_with_per_sample_context():
    model = small_draw()
    heads = nn.ModuleDict({"z": RecordingHead(model.sites["z"])})
    model(binary_images(3), heads, n_samples=4, generator=torch.Generator().manual_seed(0))
    assert heads["z"].context_shapes == [(4, 3, 16)] * SMALL["steps"]


def test_forward_is_deterministic_given_the_generator():
    model = small_draw()
    heads = build_heads(MeanFieldHead, model.sites)
    x = binary_images(2)
    first = model(x, heads, 3, torch.Generator().manual_seed(7))
    second = model(x, heads, 3, torch.Generator().manual_seed(7))
    torch.testing.assert_close(first.log_weights, second.log_weights, rtol=0, atol=0)


def test_reconstruction_is_the_likelihood_mean_of_the_same_trajectory():
    """In float64, with the rounding of the two routes as the tolerance: p = sigmoid(c) is off
    by a few eps relative, which moves log p(x | p) by eps / min(p, 1 - p) per pixel, and the
    trace's sum over P pixels by at most P eps times its magnitude."""
    model = small_draw().double()
    heads = build_heads(MeanFieldHead, model.sites).double()
    x = binary_images(4).double()
    seed = varied_seed(3)
    trace = model(x, heads, 1, torch.Generator().manual_seed(seed))
    means = model.reconstruct(x, heads, torch.Generator().manual_seed(seed))
    assert means.shape == x.shape and ((means > 0) & (means < 1)).all()
    p = means.flatten(1)  # [B, P]
    log_likelihood = bernoulli_log_prob(torch.logit(p), x.flatten(1))
    eps = torch.finfo(torch.float64).eps
    per_pixel = (1 / torch.minimum(p, 1 - p)).sum(-1)
    tolerance = 4 * eps * (per_pixel + p.shape[-1] * log_likelihood.abs())  # [B]
    difference = (trace.terms["log_likelihood"][0] - log_likelihood).abs()
    assert (difference <= tolerance).all(), (difference, tolerance)


def test_samples_and_canvas_steps_figure():
    model = small_draw()
    samples = model.sample(5, torch.Generator().manual_seed(4))
    assert samples.shape == (5, *X_SHAPE) and ((samples >= 0) & (samples <= 1)).all()
    figures = model.extra_figures(5, torch.Generator().manual_seed(4))
    steps = len(figure_steps(model.steps))
    assert steps == model.steps == 3
    canvas_steps = figures["canvas_steps"]
    assert canvas_steps.shape == (5 * steps, *X_SHAPE)
    # rows are samples, columns steps: the last column of row i is the final canvas of sample i
    # the same draws through the same decoder: bit for bit
    torch.testing.assert_close(canvas_steps[steps - 1 :: steps], samples, rtol=0, atol=0)


def test_figure_steps_are_evenly_spaced_and_end_at_the_last_step():
    assert figure_steps(64) == [0, 9, 18, 27, 36, 45, 54, 63]
    assert figure_steps(3) == [0, 1, 2]
    assert figure_steps(1) == [0]


def test_bad_input_is_refused():
    model = small_draw()
    heads = build_heads(MeanFieldHead, model.sites)
    with pytest.raises(ValueError, match="binarize"):
        model(torch.full((2, *X_SHAPE), 0.5), heads)
    with pytest.raises(ValueError, match="DRAW expects x of shape"):
        model(torch.zeros(2, 1, 7, 7), heads)
    with pytest.raises(ValueError, match=r"model\.steps"):
        DRAW(X_SHAPE, steps=0)


def test_model_config_builds_the_paper_architecture():
    config = OmegaConf.load(CONFIG)
    assert config.pop("name") == "draw"
    model = hydra.utils.instantiate(config)(x_shape=(1, 28, 28))
    assert isinstance(model, DRAW)
    assert model.steps == 64 and model.sites == {"z": SiteSpec(context_dim=256, z_dim=100)}
    assert model.reader.output_dim == 2 * 2 * 2  # two 2 x 2 glimpses
    assert model.writer.patch.out_features == 5 * 5
    assert model.decoder.hidden_size == 256


@pytest.mark.parametrize("head", ["mean_field", "vgp_collapsed"])
def test_a_few_adam_steps_raise_the_bound(head: str):
    model = small_draw()
    torch.manual_seed(1)
    heads = build_heads(HEADS[head], model.sites)
    x = binary_images(16, seed=5)
    optimizer = torch.optim.Adam([*model.parameters(), *heads.parameters()], lr=1e-2)
    generator = torch.Generator().manual_seed(6)

    def evaluate() -> float:
        with torch.no_grad():
            trace = model(x, heads, 8, torch.Generator().manual_seed(9))
        return bound(trace.log_weights).mean().item()

    before = evaluate()
    for _ in range(30):
        loss = -bound(model(x, heads, 1, generator).log_weights).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert evaluate() > before + 2.0


@pytest.mark.parametrize("inference", ["vae", "vgp"])
def test_table1_experiment_runs_one_step_and_saves_figures(inference: str, tmp_path: Path):
    experiment = f"table1_draw_{inference}"
    overrides = [
        f"experiment={experiment}",
        "dataset=synthetic",
        "dataset.shape=[1,8,8]",
        "dataset.n_train=4",
        "dataset.n_valid=4",
        "dataset.n_test=4",
        "model.steps=2",
        "model.encoder_size=8",
        "model.decoder_size=8",
        "model.z_dim=3",
        "trainer.batch_size=4",
        "trainer.epochs=1",  # one step; an epoch must end for the trainer to save images
        "trainer.image_every=1",
        "trainer.progress=false",
        "eval.is_samples=2",
        "eval.chunk_size=2",
        "eval.batch_size=4",
        "device=cpu",
    ]
    if inference == "vgp":
        overrides += ["inference.variational_data_size=8", "inference.aux_hidden_dims=[8]"]
    cfg = compose_config(overrides)
    assert (cfg.model.read_size, cfg.model.write_size, cfg.model.attention) == (2, 5, True)
    metrics = train(cfg, tmp_path)
    assert metrics["status"] == "finished" and metrics["experiment"] == experiment
    assert metrics["steps"] == 1
    for name in ("samples", "reconstructions", "canvas_steps"):
        assert Image.open(tmp_path / f"{name}.png").size[0] > 0
        assert (tmp_path / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"


def test_the_filter_floor_moves_the_log_weights_by_less_than_a_micro_nat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DRAW at MNIST's image size with narrow windows (float64): the log importance weights
    with the attention filters' exponent floor and without it differ, but by less than 1e-6."""
    from vgp_bench.models import attention

    torch.manual_seed(3)
    model = DRAW((1, 28, 28), steps=8, read_size=2, write_size=5, encoder_size=32,
                 decoder_size=32, z_dim=4).double()  # fmt: skip
    with torch.no_grad():
        for module in (model.reader.window, model.writer.window):
            module.bias[2] = -4.0  # log sigma^2: narrow filters, most weights underflow
    heads = build_heads(MeanFieldHead, model.sites).double()
    generator = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((4, 1, 28, 28), 0.2, dtype=torch.float64), generator=generator)
    floored = model(x, heads, 5, torch.Generator().manual_seed(1)).log_weights  # [S, B]
    monkeypatch.setattr(attention, "LOG_FILTER_FLOOR", -float("inf"))
    exact = model(x, heads, 5, torch.Generator().manual_seed(1)).log_weights
    difference = (floored - exact).abs().max().item()
    assert 0 < difference < 1e-6
