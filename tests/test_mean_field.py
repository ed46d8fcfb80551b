"""The mean-field Gaussian head."""

from __future__ import annotations

import torch

from vgp_bench.distributions import normal_log_prob, positive_scale
from vgp_bench.inference.base import SiteSpec
from vgp_bench.inference.mean_field import MeanFieldHead


def test_log_q_is_the_gaussian_density_and_moments_match() -> None:
    torch.manual_seed(0)
    head = MeanFieldHead(SiteSpec(context_dim=3, z_dim=2))
    context = torch.randn(4, 3)
    sample = head(context, 20_000, torch.Generator().manual_seed(0))
    mean, raw = head.parameter_net(context).chunk(2, dim=-1)
    scale = positive_scale(raw, head.min_scale)
    torch.testing.assert_close(
        sample.log_q, normal_log_prob(sample.z, mean, scale), atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(sample.z.mean(0), mean, atol=0.05, rtol=0)
    torch.testing.assert_close(sample.z.std(0), scale, atol=0.05, rtol=0.05)


def test_per_sample_context_and_determinism() -> None:
    head = MeanFieldHead(SiteSpec(context_dim=3, z_dim=2), hidden_dims=(8,))
    context = torch.randn(5, 4, 3)  # [S, B, C]
    first = head(context, 5, torch.Generator().manual_seed(3))
    second = head(context, 5, torch.Generator().manual_seed(3))
    assert first.z.shape == (5, 4, 2) and first.log_q.shape == (5, 4)
    torch.testing.assert_close(first.z, second.z, rtol=0, atol=0)
