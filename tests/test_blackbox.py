"""Black-box fitting of unnormalized 2-D densities: targets, `fit`, and the `vgp-fit` CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
import torch

from vgp_bench.blackbox import families, fit
from vgp_bench.blackbox.cli import fit_figure, histogram_grid, run, target_density_grid
from vgp_bench.run.config.store import compose_config
from vgp_bench.run.process.runtime import build
from vgp_bench.targets import (
    TARGETS,
    Banana,
    CorrelatedGaussian,
    Funnel,
    Mixture,
    Ring,
    ring_normalizer,
)

IMPORTANCE_SAMPLES = 500  # a realistic evaluation budget for a 2-D target


def grid_log_normalizer(target, box, points_per_axis: int = 1201) -> float:
    """log of a midpoint-rule integral of exp(log p~) over `box`, in float64."""
    (low_x, high_x), (low_y, high_y) = box
    step_x = (high_x - low_x) / points_per_axis
    step_y = (high_y - low_y) / points_per_axis
    x = low_x + step_x * (torch.arange(points_per_axis, dtype=torch.float64) + 0.5)
    y = low_y + step_y * (torch.arange(points_per_axis, dtype=torch.float64) + 0.5)
    grid_x, grid_y = torch.meshgrid(x, y, indexing="ij")
    points = torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=1)
    return float(torch.logsumexp(target.log_density(points), 0)) + math.log(step_x * step_y)


@pytest.mark.parametrize(
    ("target", "box"),
    [
        (CorrelatedGaussian(0.95), ((-8.0, 8.0), (-8.0, 8.0))),
        (CorrelatedGaussian(-0.5), ((-8.0, 8.0), (-8.0, 8.0))),
        (Banana(), ((-9.0, 9.0), (-6.0, 25.0))),
        (Banana(curvature=-0.8, width=1.0, thickness=0.3), ((-7.0, 7.0), (-30.0, 3.0))),
        (Mixture(), ((-10.0, 10.0), (-7.0, 7.0))),
        (Mixture(((0, 0), (4, 1), (-2, 5)), scale=0.7, weights=(1, 2, 3)), ((-6, 8), (-4, 9))),
        (Ring(), ((-5.0, 5.0), (-5.0, 5.0))),
    ],
)
def test_log_normalizer_matches_quadrature(target, box) -> None:
    assert target.log_normalizer == pytest.approx(grid_log_normalizer(target, box), abs=1e-4)


def test_funnel_log_normalizer_matches_quadrature() -> None:
    # Integrate in (v, u) with x = u e^(v/2), which straightens the funnel's neck.
    target = Funnel(scale=3.0)
    v = torch.linspace(-25.0, 30.0, 2201, dtype=torch.float64)
    u = torch.linspace(-12.0, 12.0, 1201, dtype=torch.float64)
    grid_v, grid_u = torch.meshgrid(v, u, indexing="ij")
    points = torch.stack([grid_v.reshape(-1), (grid_u * torch.exp(grid_v / 2)).reshape(-1)], 1)
    log_integrand = target.log_density(points) + points[:, 0] / 2  # + log |dx/du|
    area = float((v[1] - v[0]) * (u[1] - u[0]))
    quadrature = float(torch.logsumexp(log_integrand, 0)) + math.log(area)
    assert target.log_normalizer == pytest.approx(quadrature, abs=1e-6)


def test_ring_quadrature_matches_closed_form() -> None:
    # int_0^inf 2 pi r N-kernel(r; R, w) dr = 2 pi (w^2 e^{-R^2/2w^2} + R w sqrt(2 pi) Phi(R/w)).
    for radius, width in [(2.5, 0.35), (1.0, 0.8), (0.3, 1.0)]:
        closed_form = (
            2
            * math.pi
            * (
                width**2 * math.exp(-(radius**2) / (2 * width**2))
                + radius * width * math.sqrt(2 * math.pi) * NormalDist().cdf(radius / width)
            )
        )
        assert ring_normalizer(radius, width) == pytest.approx(closed_form, rel=1e-10)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_configs_build_and_evaluate_in_both_precisions(name: str) -> None:
    cfg = compose_config([f"target={name}"], config_name="fit")
    target = build(cfg.target)
    assert isinstance(target, TARGETS[name])
    z = torch.randn(7, 2, generator=torch.Generator().manual_seed(0))
    single, double = target.log_density(z), target.log_density(z.double())
    assert single.shape == (7,) and single.dtype == torch.float32
    torch.testing.assert_close(single.double(), double, rtol=1e-5, atol=1e-5)
    (low_x, high_x), (low_y, high_y) = target.plot_range
    assert low_x < high_x and low_y < high_y
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        target.log_density(torch.zeros(3, 3))


def test_bad_target_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="rho"):
        CorrelatedGaussian(1.0)
    with pytest.raises(ValueError, match="weights"):
        Mixture(((0, 0), (1, 1)), weights=(1.0,))
    with pytest.raises(ValueError, match="width"):
        Ring(width=0.0)


@pytest.mark.parametrize("family", families())  # one per configs/inference/ file, mean_field
def test_fit_returns_a_family_with_samples_bound_and_estimate(family: str) -> None:
    target = Banana()
    fitted = fit(target.log_density, 2, family=family, steps=15, seed=3, samples_per_step=8)
    assert fitted.family == family and len(fitted.history) == 15
    assert fitted.sample(11).shape == (11, 2)
    bound = fitted.elbo(200)
    log_z = fitted.log_marginal(200, chunk_size=64)
    assert math.isfinite(bound) and math.isfinite(log_z)
    # The IS estimate of log Z is at least the bound up to Monte Carlo noise of a short fit.
    assert log_z > bound - 0.5
    again = fit(target.log_density, 2, family=family, steps=15, seed=3, samples_per_step=8)
    assert again.history == fitted.history  # every random draw comes from `seed`
    for name, value in fitted.head.state_dict().items():
        assert torch.equal(value, again.head.state_dict()[name]), name


def test_families_are_built_from_their_inference_configs() -> None:
    from vgp_bench.blackbox import build_head
    from vgp_bench.inference.hvi import HVIHead
    from vgp_bench.inference.planar_flow import PlanarFlowHead

    flow = build_head("planar_flow", 2)
    assert isinstance(flow, PlanarFlowHead) and flow.flow_length == 16  # FAMILY_DEFAULTS
    assert build_head("planar_flow", 2, flow_length=3).flow_length == 3
    hvi = build_head("hvi", 2)  # configs/inference/hvi.yaml: 8 leapfrog steps
    assert isinstance(hvi, HVIHead) and hvi.leapfrog_steps == 8


def test_fit_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown family"):
        fit(Banana().log_density, 2, family="flow", steps=1)
    with pytest.raises(ValueError, match=r"shape \[n\]"):
        fit(lambda z: z.sum(), 2, family="mean_field", steps=1)


def test_mean_field_reaches_its_closed_form_optimum_on_a_correlated_gaussian() -> None:
    # The best factorized Gaussian has variances 1 - rho^2; its bound is log Z + log(1-rho^2)/2.
    rho = 0.8
    target = CorrelatedGaussian(rho)
    fitted = fit(target.log_density, 2, family="mean_field", steps=800, seed=0)
    optimum = target.log_normalizer + 0.5 * math.log(1 - rho**2)
    assert fitted.elbo(20_000) == pytest.approx(optimum, abs=0.02)
    standard_deviations = fitted.sample(20_000).std(0)
    torch.testing.assert_close(standard_deviations, torch.full((2,), 0.6), atol=0.03, rtol=0)
    # the optimum is narrower than the target along (1, 1): E_q[w^2] is finite only when
    # 2 Sigma^-1 - I / (1 - rho^2) is positive definite, i.e. rho < 0.5; k-hat flags it
    _, pareto_k = fitted.log_marginal_with_reliability(5000)
    assert pareto_k > 0.7


def test_cli_writes_table_picture_and_summary(tmp_path: Path, capsys) -> None:
    overrides = [
        "target=mixture",
        "steps=4",
        "samples.per_step=4",
        "samples.bound=50",
        "samples.importance=50",
        "samples.plot=500",
        f"out={tmp_path / 'picture.png'}",
    ]
    cfg = compose_config(overrides, config_name="fit")
    result = run(cfg, tmp_path)
    printed = capsys.readouterr().out
    assert all(name in printed for name in ("vgp", "mean_field", "planar_flow", "hvi"))
    assert "true log Z" in printed and "seconds" in printed
    assert result["picture"] == str(tmp_path / "picture.png")
    assert (tmp_path / "picture.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "picture.pdf").read_bytes()[:5] == b"%PDF-"
    summary = json.loads((tmp_path / "fit.json").read_text())
    assert [row["family"] for row in summary["families"]] == [
        "vgp",
        "mean_field",
        "planar_flow",
        "hvi",
    ]
    assert summary["true_log_z"] == pytest.approx(result["true_log_z"])


# --- the acceptance tests of black-box fitting (minutes; run with -m slow) -------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vgp_bound_is_tight_on_a_correlated_gaussian_where_mean_field_is_not(seed: int) -> None:
    target = CorrelatedGaussian(0.95)
    vgp = fit(target.log_density, 2, family="vgp", seed=seed)
    mean_field = fit(target.log_density, 2, family="mean_field", seed=seed)
    assert vgp.elbo(20_000) > target.log_normalizer - 0.1
    # Mean-field's best is log Z - 1.16 at rho = 0.95.
    assert mean_field.elbo(20_000) < target.log_normalizer - 1.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vgp_estimates_log_z_of_two_modes_where_mean_field_misses_one(seed: int) -> None:
    target = Mixture()
    vgp = fit(target.log_density, 2, family="vgp", seed=seed)
    mean_field = fit(target.log_density, 2, family="mean_field", seed=seed)
    assert abs(vgp.log_marginal(IMPORTANCE_SAMPLES) - target.log_normalizer) < 0.1
    # A single-mode proposal misses one of two equal modes: about log 2.
    assert target.log_normalizer - mean_field.log_marginal(IMPORTANCE_SAMPLES) > 0.4


def test_the_fit_figure_draws_each_panel_scaled_over_the_plotting_box() -> None:
    """A panel per density, each divided by its own maximum, over the target's box, with the
    title's first field on its own line."""
    target = build(compose_config(["target=mixture"], config_name="fit").target)
    density = target_density_grid(target, resolution=20)
    counts = histogram_grid(torch.zeros(10, 2), target.plot_range, resolution=20)
    figure = fit_figure({"target  log Z = 1.000": density, "vgp  bound 0.5": counts},
                        target.plot_range)  # fmt: skip
    first, second = figure.axes
    (image,) = first.get_images()
    np.testing.assert_allclose(image.get_array(), (density / density.max()).numpy())
    (low_x, high_x), (low_y, high_y) = target.plot_range
    assert tuple(image.get_extent()) == (low_x, high_x, low_y, high_y)
    assert first.get_title() == "target\nlog Z = 1.000" and second.get_title() == "vgp\nbound 0.5"
    (histogram,) = second.get_images()
    assert float(np.asarray(histogram.get_array()).sum()) == 1.0  # ten draws in one cell
    assert (first.get_xlabel(), first.get_ylabel()) == ("z1", "z2")
