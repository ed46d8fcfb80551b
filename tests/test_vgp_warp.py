"""The VGP's warp: the identity prior mean starts as the mean-field family, the warp statistics
see the rank of the mapping, and a paper-trained head is evaluated with an unbiased weight."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.helpers import paper_form
from tests.linear_gaussian import LinearGaussianModel
from vgp_bench.distributions import normal_log_prob
from vgp_bench.estimators import importance_weighted_log_likelihood
from vgp_bench.gp.conditional import DenseOutputs, affine_projector, affine_weights
from vgp_bench.inference.base import SiteSpec
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.inference.vgp_statistics import (
    debiased_affine_covariance,
    gaussian_total_correlation,
    residual_covariance_of_fit,
)
from vgp_bench.run.folder.metrics import family_structure


def make_head(spec: SiteSpec, seed: int = 0, **options) -> VGPHead:
    """The paper's form with `options` over it, small."""
    torch.manual_seed(seed)  # module initialization only; sampling uses explicit generators
    small = {**paper_form(), "variational_data_size": 64, "aux_hidden_dims": (32,)}
    return VGPHead(spec, **{**small, **options})


@pytest.mark.parametrize(
    ("outputs", "scale"),
    [("dense", "context"), ("global", "context"), ("shared_basis", "context"), ("dense", "tied")],
)
def test_identity_prior_mean_starts_as_the_mean_field_family(outputs, scale):
    """With T = 0 and a negligible GP variance, log q~ is log N(z; m(h), s(h)^2 + sigma^2)."""
    spec = SiteSpec(context_dim=6, z_dim=5)
    head = make_head(
        spec,
        prior_mean="identity",
        outputs=outputs,
        outputs_rank=3,
        kernel_variance=1e-9,
        mean_field_scale=scale,
    ).double()
    context = torch.randn(7, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        site = head(context, 50, torch.Generator().manual_seed(1))
        data = head.prepare(context)
    scale = (data.warp_scale.pow(2) + data.scale.pow(2)).sqrt()  # [B, D]
    mean_field = normal_log_prob(site.z, data.location, scale)  # [S, B]
    torch.testing.assert_close(site.log_q, mean_field, atol=1e-4, rtol=0)
    assert (data.scale < data.warp_scale).all()  # most of the spread comes through xi
    if scale == "tied":
        torch.testing.assert_close(data.scale, 0.1 * data.warp_scale)
    stats = head.diagnostics(context, 200, torch.Generator().manual_seed(2))
    assert stats["warp_rank"] == 5  # the linear warp moves z in every direction
    assert stats["nonlinear_warp_share"] < 1e-6  # ...and is linear: mean-field in disguise
    assert stats["warp_share"] > 1.0
    assert stats["variance_dispersion"] < 1e-6  # negligible GP variance: a constant spread


def test_linear_warp_control_is_the_gaussian_whatever_the_gp():
    """warp=linear takes the GP out: log q~ is log N(z; m(h), s(h)^2 + sigma^2) exactly, even
    with large outputs T and kernel variance, and the warp statistics say mean-field."""
    spec = SiteSpec(context_dim=6, z_dim=5)
    head = make_head(
        spec,
        prior_mean="identity",
        outputs="global",
        kernel_variance=1.0,
        mean_field_scale="tied",
        warp="linear",
    ).double()
    with torch.no_grad():
        head.global_outputs.normal_(generator=torch.Generator().manual_seed(3))
    context = torch.randn(7, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        site = head(context, 50, torch.Generator().manual_seed(1))
        data = head.prepare(context)
    scale = (data.warp_scale.pow(2) + data.scale.pow(2)).sqrt()  # [B, D]
    torch.testing.assert_close(site.log_q, normal_log_prob(site.z, data.location, scale))
    stats = head.diagnostics(context, 200, torch.Generator().manual_seed(2))
    assert stats["nonlinear_warp_share"] < 1e-12 and stats["variance_dispersion"] < 1e-12
    assert stats["warp_share"] == pytest.approx(100.0, rel=0.1)  # s^2 / sigma^2 over 200 draws
    assert abs(stats["total_correlation"]) < 1e-9  # a diagonal warp: mean-field exactly
    with pytest.raises(ValueError, match=r"warp=linear under the zero prior mean"):
        make_head(spec, warp="linear", mean_field_scale="gp", objective="hierarchical")
    label = family_structure(
        {"outputs": "global", "prior_mean": "identity", "warp": "linear"}
        | {"mean_field_scale": "tied", "noise_ratio": 0.1}
    )
    assert label == "no GP (linear warp), identity mean, sigma=0.1 s"


def test_the_affine_projector_is_the_least_squares_fit_of_the_outputs():
    generator = torch.Generator().manual_seed(5)
    inputs = torch.randn(40, 3, generator=generator, dtype=torch.float64)  # S [M, c]
    outputs = torch.randn(2, 40, 4, generator=generator, dtype=torch.float64)  # T [B, M, d]
    query = torch.randn(6, 2, 3, generator=generator, dtype=torch.float64)  # xi [S, B, c]
    projector = affine_projector(inputs, ridge=0.0)  # [c + 1, M]
    mean = DenseOutputs(outputs).mean(affine_weights(projector, query))  # [S, B, d]
    design = torch.cat([inputs, torch.ones(40, 1, dtype=torch.float64)], dim=-1)
    for example in range(2):
        coefficients = torch.linalg.lstsq(design, outputs[example]).solution  # [c + 1, d]
        expected = torch.cat([query[:, example], torch.ones(6, 1, dtype=torch.float64)], -1)
        torch.testing.assert_close(mean[:, example], expected @ coefficients, rtol=1e-10, atol=0)
    # an affine T is reproduced exactly, and the default ridge (1e-6 of the diagonal) is small
    slope, offset = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    affine_outputs = DenseOutputs(inputs @ slope + offset)
    fitted = affine_outputs.mean(affine_weights(affine_projector(inputs), query))
    torch.testing.assert_close(fitted, query @ slope + offset, rtol=0, atol=1e-4)


def test_the_paper_forms_twin_takes_the_gp_out_of_the_same_variational_data():
    """warp=linear under the zero prior mean: E[f | xi] is the affine fit of the dense T(h) on
    S, Var[f | xi] = 0, so q(z | x) is Gaussian (no nonlinear warp), from the same S and T(h)
    as the paper's form with the same seed."""
    spec = SiteSpec(context_dim=6, z_dim=5)
    options = {"outputs": "dense", "init_output_spread": 1.0}
    twin = make_head(spec, warp="linear", **options).double()
    paper = make_head(spec, **options).double()
    assert twin.state_dict().keys() == paper.state_dict().keys()
    for name, value in twin.state_dict().items():
        assert torch.equal(value, paper.state_dict()[name]), name
    context = torch.randn(7, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    xi = torch.randn(30, 7, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        data = twin.prepare(context)
        mean, variance = twin.f_mean_variance(data, xi)
    assert not variance.any()
    expected = data.outputs.mean(affine_weights(affine_projector(data.inputs), xi))
    torch.testing.assert_close(mean, expected)
    twin_stats = twin.diagnostics(context, 200, torch.Generator().manual_seed(2))
    paper_stats = paper.diagnostics(context, 200, torch.Generator().manual_seed(2))
    assert twin_stats["nonlinear_warp_share"] < 1e-10 < paper_stats["nonlinear_warp_share"]
    label = family_structure(
        {"outputs": "dense", "prior_mean": "zero", "warp": "linear", "variational_data_size": 500}
    )
    assert label == "dense T, no GP (affine fit), zero mean, m=500"


def test_a_fixed_r_makes_the_control_the_vae_in_value_and_gradient():
    """aux_correction=none: r(xi | x, z) is the linear warp's exact inverse whatever r's network
    holds, so the control's log q~ is the Gaussian's log density and its reparameterized
    derivative at fixed noise is -d log scale, as the VAE's; r's network gets no gradient."""
    spec = SiteSpec(context_dim=6, z_dim=5)
    options = {"prior_mean": "identity", "outputs": "global", "mean_field_scale": "tied"}
    fixed = make_head(spec, warp="linear", aux_correction="none", **options).double()
    learned = make_head(spec, warp="linear", **options).double()
    for head in (fixed, learned):  # a correction far from zero
        with torch.no_grad():
            for parameter in head.auxiliary.parameters():
                parameter.normal_(generator=torch.Generator().manual_seed(4))
    context = torch.randn(7, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    site = fixed(context, 40, torch.Generator().manual_seed(1))  # [S, B]
    data = fixed.prepare(context)
    scale = (data.warp_scale.pow(2) + data.scale.pow(2)).sqrt()  # [B, D]
    torch.testing.assert_close(site.log_q, normal_log_prob(site.z, data.location, scale))
    site.log_q.sum().backward()
    noise_free = -40 * fixed.prepare(context).warp_scale.log().sum()  # S x -sum log s(h)
    expected = torch.autograd.grad(noise_free, fixed.warp_scale_net.bias)[0]
    torch.testing.assert_close(fixed.warp_scale_net.bias.grad, expected)
    assert fixed.location_net.bias.grad.abs().max() < 1e-9  # no noise-dependent part
    assert all(parameter.grad is None for parameter in fixed.auxiliary.parameters())
    with torch.no_grad():
        other = learned(context, 40, torch.Generator().manual_seed(1))
    assert (other.log_q - normal_log_prob(other.z, data.location, scale)).abs().max() > 0.1
    with pytest.raises(ValueError, match=r"inference\.aux_correction"):
        make_head(spec, aux_correction="none")  # zero prior mean: no inverse to fix r at
    with pytest.raises(ValueError, match=r"inference\.aux_correction"):
        make_head(spec, aux_correction="exact", **options)
    label = family_structure(
        {"outputs": "global", "prior_mean": "identity", "warp": "linear", "aux_correction": "none"}
    )
    assert label == "no GP (linear warp), identity mean, r fixed"


def test_warp_statistics_see_a_rank_limited_mapping():
    """shared_basis under the zero prior mean warps in at most r + 1 directions; dense in d."""
    spec = SiteSpec(context_dim=6, z_dim=12)
    context = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    options = {"init_output_spread": 1.0, "kernel_inverse_lengthscale": 0.5}
    limited = make_head(spec, outputs="shared_basis", outputs_rank=3, **options)
    full = make_head(spec, outputs="dense", **options)
    limited_stats = limited.diagnostics(context, 300, torch.Generator().manual_seed(1))
    full_stats = full.diagnostics(context, 300, torch.Generator().manual_seed(1))
    assert limited_stats["warp_rank"] <= 4
    assert full_stats["warp_rank"] == 12
    assert full_stats["nonlinear_warp_share"] > 0.01  # an RBF warp is not affine
    assert full_stats["variance_dispersion"] > 1e-3  # v(xi) shrinks near the inputs S


def test_a_paper_trained_head_is_evaluated_with_the_unbiased_collapsed_weight():
    """E[w] = p(x) in evaluation mode; the Eq. 7 weight of training mode is biased low."""
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5)
    x = model.sample_data(4)
    for paper_auxiliary in ("factorized", "conditional"):
        head = make_head(
            SiteSpec(context_dim=4, z_dim=2),
            objective="paper",
            paper_auxiliary=paper_auxiliary,
            variational_data_size=16,
        )
        heads = nn.ModuleDict({"z": head})
        optimizer = torch.optim.Adam(head.parameters(), lr=3e-2)
        generator = torch.Generator().manual_seed(1)
        for _ in range(400):
            loss = -model(x, heads, 16, generator).log_weights.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        exact = model.log_marginal(x).float()
        with torch.no_grad():
            head.eval()
            evaluation = model(x, heads, 50000, torch.Generator().manual_seed(2)).log_weights
            head.train()
            training = model(x, heads, 50000, torch.Generator().manual_seed(2)).log_weights
        unbiased = importance_weighted_log_likelihood(evaluation)
        biased = importance_weighted_log_likelihood(training)
        assert (unbiased - exact).abs().max() < 0.05, (paper_auxiliary, unbiased - exact)
        assert (biased - exact).max() < -0.3  # E[w] = p(x) e^{-E KL}: measured 0.5-0.9 low
        assert "collapsed" in head.evaluation_weight


def test_prior_mean_options_are_checked():
    spec = SiteSpec(context_dim=4, z_dim=3)
    with pytest.raises(ValueError, match="prior_mean=identity needs latent_input_dim"):
        make_head(spec, prior_mean="identity", latent_input_dim=2)
    with pytest.raises(ValueError, match=r"inference\.prior_mean"):
        make_head(spec, prior_mean="linear")
    with pytest.raises(ValueError, match="mean_field_scale=tied needs prior_mean=identity"):
        make_head(spec, mean_field_scale="tied")
    with pytest.raises(ValueError, match=r"inference\.paper_auxiliary"):
        make_head(spec, objective="paper", paper_auxiliary="both")
    assert math.isfinite(make_head(spec, prior_mean="identity").kernel.variance.item())


def test_total_correlation_is_what_correlation_is_worth_to_the_entropy():
    """0 for a diagonal covariance; -1/2 log(1 - rho^2) for two unit variances with correlation
    rho; and a shared affine warp that mixes coordinates is seen by the head's statistics."""
    rho = 0.8
    pair = torch.tensor([[[1.0, rho], [rho, 1.0]], [[2.0, 0.0], [0.0, 3.0]]], dtype=torch.float64)
    values = gaussian_total_correlation(pair)
    torch.testing.assert_close(
        values[0], torch.tensor(-0.5 * math.log(1 - rho**2), dtype=values.dtype)
    )
    assert float(values[1]) == pytest.approx(0.0, abs=1e-12)
    spec = SiteSpec(context_dim=6, z_dim=5)
    context = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    head = make_head(spec, prior_mean="identity", outputs="global", mean_field_scale="tied")
    before = head.diagnostics(context, 300, torch.Generator().manual_seed(1))
    with torch.no_grad():  # outputs T = A S at the inputs S: a mean warp that mixes coordinates
        mixing = torch.randn(5, 5, generator=torch.Generator().manual_seed(2))
        head.global_outputs.copy_(head.inputs @ mixing.T)
    after = head.diagnostics(context, 300, torch.Generator().manual_seed(1))
    assert before["total_correlation"] < 0.05 < after["total_correlation"]


def test_the_warp_fit_does_not_count_its_own_noise():
    """With c + 1 coefficients fitted to N draws, the residual covariance over N - c - 1
    degrees of freedom is unbiased and the slopes' noise is taken out of L^T L: on a known
    affine map plus correlated noise, N = 2 c, the raw L^T L is 60% high, ours close."""
    generator = torch.Generator().manual_seed(0)
    draws, c, d, repeats = 40, 20, 4, 400
    noise_covariance = 0.5 * torch.eye(d, dtype=torch.float64) + 0.5
    slopes_true = 0.25 * torch.randn(c, d, generator=generator, dtype=torch.float64)
    xi = torch.randn(repeats, draws, c, generator=generator, dtype=torch.float64)
    design = torch.cat([torch.ones(repeats, draws, 1, dtype=torch.float64), xi], -1)
    noise = torch.randn(repeats, draws, d, generator=generator, dtype=torch.float64)
    outputs = xi @ slopes_true + noise @ torch.linalg.cholesky(noise_covariance).T  # [R, N, D]
    coefficients = torch.linalg.lstsq(design, outputs).solution  # [R, c + 1, D]
    residual_covariance = residual_covariance_of_fit(outputs - design @ coefficients, c + 1)
    torch.testing.assert_close(residual_covariance.mean(0), noise_covariance, atol=0.05, rtol=0)
    slopes = coefficients[:, 1:, :]
    truth = slopes_true.T @ slopes_true
    raw = (slopes.transpose(1, 2) @ slopes).mean(0)
    each = debiased_affine_covariance(slopes, design, residual_covariance)  # [R, D, D]
    debiased = each.mean(0)
    assert (raw - truth).abs().max() > 0.4 * truth.abs().max()
    assert (debiased - truth).abs().max() < 0.15 * truth.abs().max()
    # the inflation is tr((Xc^T Xc)^-1) of the centred draws, wherever no eigenvalue is cut off
    centred_xi = xi - xi.mean(1, keepdim=True)
    inflation = torch.linalg.inv(centred_xi.transpose(1, 2) @ centred_xi).diagonal(0, 1, 2).sum(-1)
    unprojected = slopes.transpose(1, 2) @ slopes - inflation[:, None, None] * residual_covariance
    kept = torch.linalg.eigvalsh(unprojected)[:, 0] > 0  # [R]
    assert kept.sum() > 100  # half of the repeats
    torch.testing.assert_close(each[kept], unprojected[kept], atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match="more draws"):
        residual_covariance_of_fit(outputs[0, : c + 1], c + 1)


def test_nonlinear_share_does_not_depend_on_the_number_of_draws():
    """An in-sample fit of c + 1 coefficients once hid (c + 1) / N of the nonlinear part: with
    the residual over its degrees of freedom, 2 (c + 1) draws agree with 20000; fewer draws than
    that are raised to it."""
    spec = SiteSpec(context_dim=6, z_dim=30)
    options = {"init_output_spread": 1.0, "kernel_inverse_lengthscale": 0.3}
    head = make_head(spec, outputs="dense", **options).double()
    context = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    few = [
        head.diagnostics(context, 62, torch.Generator().manual_seed(seed))["nonlinear_warp_share"]
        for seed in range(4)
    ]
    many = head.diagnostics(context, 20000, torch.Generator().manual_seed(9))
    assert sum(few) / len(few) == pytest.approx(many["nonlinear_warp_share"], rel=0.15)
    raised = head.diagnostics(context, 10, torch.Generator().manual_seed(0))
    again = head.diagnostics(context, 62, torch.Generator().manual_seed(0))
    assert raised == again
