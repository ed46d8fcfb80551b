"""The DLGM: sites, shapes, the hierarchical prior, binary-only input."""

from __future__ import annotations

import pytest
import torch

from vgp_bench.distributions import normal_log_prob, positive_scale, standard_normal_log_prob
from vgp_bench.inference.base import build_heads
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.models.dlgm import DLGM


def binary_batch(batch: int = 5) -> torch.Tensor:
    return torch.bernoulli(
        torch.full((batch, 1, 6, 6), 0.4), generator=torch.Generator().manual_seed(0)
    )


@pytest.mark.parametrize(
    ("latent_dims", "hidden_dims", "context_dim"),
    [([4], [[16, 12]], 12), ([5, 3], [[16], [8, 7]], 16 + 7)],
)
def test_sites_and_trace_shapes(latent_dims, hidden_dims, context_dim) -> None:
    torch.manual_seed(0)
    model = DLGM((1, 6, 6), latent_dims, hidden_dims)
    assert model.sites["z"].z_dim == sum(latent_dims)
    assert model.sites["z"].context_dim == context_dim
    heads = build_heads(MeanFieldHead, model.sites)
    trace = model(binary_batch(), heads, 3, torch.Generator().manual_seed(1))
    assert trace.log_p.shape == trace.log_q.shape == (3, 5)
    assert set(trace.terms) >= {"log_likelihood", "log_prior"}
    (-trace.log_weights.mean()).backward()
    for parameter in [*model.parameters(), *heads.parameters()]:
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all()
    assert model.sample(7, torch.Generator().manual_seed(0)).shape == (7, 1, 6, 6)
    assert model.reconstruct(binary_batch(), heads).shape == (5, 1, 6, 6)


def test_two_layer_prior_is_the_chain_rule() -> None:
    torch.manual_seed(0)
    model = DLGM((1, 6, 6), [5, 3], [[16], [8]])
    z1, z2 = torch.randn(2, 4, 5), torch.randn(2, 4, 3)
    mean, raw = model.conditional_nets[0](z2).chunk(2, dim=-1)
    expected = standard_normal_log_prob(z2) + normal_log_prob(z1, mean, positive_scale(raw, 1e-4))
    # the chain rule's terms as log_prior computes them: bit for bit
    torch.testing.assert_close(model.log_prior([z1, z2]), expected, rtol=0, atol=0)


def test_grey_levels_are_refused() -> None:
    model = DLGM((1, 6, 6), [4], [[8]])
    heads = build_heads(MeanFieldHead, model.sites)
    with pytest.raises(ValueError, match="non-binary"):
        model(torch.full((2, 1, 6, 6), 0.5), heads)


def test_mismatched_layer_config_is_explained() -> None:
    with pytest.raises(ValueError, match="one entry per stochastic layer"):
        DLGM((1, 6, 6), [4, 2], [[8]])


def test_the_runner_checks_its_images_once_at_load_not_in_every_step() -> None:
    # the check reads the batch on the host every call; the runner's batches come from an
    # ImageSplit, binary by construction, so components built from a config skip it
    from tests.helpers import TINY, compose_config
    from vgp_bench.data.base import ImageSplit
    from vgp_bench.run.loop.build import build_components

    parts = build_components(compose_config(TINY))
    assert parts.model.checks_inputs is False
    batch = parts.data.train.gather(torch.arange(8), torch.Generator().manual_seed(0))
    assert set(batch.unique().tolist()) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="binary"):  # a grey split is refused at load instead
        ImageSplit(torch.full((2, 1, 28, 28), 128, dtype=torch.uint8))
