"""The families of Table 1 beside the VGP: planar flows, HVI and the IWAE objective.

On the linear-Gaussian model log p(x) is known, so the bound of every family configs/inference/
offers is checked against it; the flow's log-determinant and the leapfrog map's volume are
checked against autograd in float64.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from torch import Tensor

from tests.helpers import compose_config, varied_seed
from tests.linear_gaussian import LinearGaussianModel
from vgp_bench.estimators import bound, importance_weighted_log_likelihood, training_bound
from vgp_bench.inference.base import SiteSpec, build_heads
from vgp_bench.inference.hvi import HVIHead, leapfrog_trajectory
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.inference.planar_flow import PlanarFlowHead, constrained_direction, planar_map
from vgp_bench.locations import group_options
from vgp_bench.run.folder.metrics import Evaluation
from vgp_bench.run.loop.step import BoundObjective
from vgp_bench.run.process.runtime import build

# Options that make a family small enough to fit here; one not named is fitted at its config's
TINY = {
    "planar_flow": ["inference.flow_length=4"],
    "hvi": ["inference.leapfrog_steps=3", "inference.aux_hidden_dims=[16]"],
    "vgp": ["inference.variational_data_size=8", "inference.aux_hidden_dims=[8]"],
}
# Every family configs/inference/ offers, built from its config as vgp-train builds it
FAMILIES = {
    name: build(compose_config([f"inference={name}", *TINY.get(name, [])]).inference)
    for name in group_options("inference")
}


def test_the_tiny_options_name_only_families_there_are() -> None:
    assert set(TINY) <= set(FAMILIES) and {"vae", "vgp", "planar_flow", "hvi"} <= set(FAMILIES)


def fitted(family: str, steps: int = 150):
    """The linear-Gaussian model, 8 data points and a head of `family` fitted by the bound."""
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(FAMILIES[family], model.sites)
    x = model.sample_data(8, seed=3)
    optimizer = torch.optim.Adam(heads.parameters(), lr=0.02)
    generator = torch.Generator().manual_seed(5)
    for _ in range(steps):
        optimizer.zero_grad()
        (-model(x, heads, 16, generator).log_weights.mean()).backward()
        optimizer.step()
    return model, heads, x


@pytest.fixture(scope="module")
def fitted_families():
    return {family: fitted(family) for family in FAMILIES}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bound_is_below_log_marginal_and_importance_sampling_converges(fitted_families, family):
    model, heads, x = fitted_families[family]
    exact = model.log_marginal(x).float()  # [B]
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        log_weights = model(x, heads, 16_384, generator).log_weights  # [S, B]
    stderr = log_weights.std(0) / math.sqrt(log_weights.shape[0])
    assert (bound(log_weights) <= exact + 3 * stderr + 1e-4).all()
    assert (exact - bound(log_weights)).mean() > 0.01  # a fit of 150 steps is not exact
    gaps = []
    for samples in (1, 64, 4096):
        per_repeat = log_weights.reshape(-1, samples, x.shape[0])  # [R, K, B]
        estimate = torch.logsumexp(per_repeat, dim=1) - math.log(samples)  # [R, B]
        gaps.append(float((exact - estimate.mean(0)).mean()))
    assert gaps[0] > gaps[1] > gaps[2] > -0.01
    assert gaps[2] < 0.02


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradients_reach_every_parameter(fitted_families, family):
    model, heads, x = fitted_families[family]
    heads.zero_grad()
    (-model(x, heads, 4, torch.Generator().manual_seed(0)).log_weights.mean()).backward()
    for name, parameter in heads.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


# --- IWAE -----------------------------------------------------------------------------------


def test_iwae_bound_rises_with_k_and_stays_below_log_marginal() -> None:
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(MeanFieldHead, model.sites)  # untrained: a loose proposal
    x = model.sample_data(8, seed=3)
    exact = float(model.log_marginal(x).mean())
    with torch.no_grad():
        log_weights = model(x, heads, 50 * 400, torch.Generator().manual_seed(1)).log_weights
    # float64: at k = 1 the mean IWAE bound and the mean bound are means of the same n values
    # in two orders, which differ by at most n eps64 times their mean magnitude
    log_weights = log_weights.double()
    iwae = training_bound("iwae")
    means = []
    for k in (1, 5, 50):
        per_repeat = log_weights.reshape(-1, k, x.shape[0])  # [R, k, B]
        means.append(float(torch.stack([iwae(chunk) for chunk in per_repeat]).mean()))
    assert means[0] + 0.5 < means[1] < means[2] - 0.1 and means[2] < exact
    tolerance = log_weights.numel() * torch.finfo(torch.float64).eps * log_weights.abs().mean()
    torch.testing.assert_close(
        means[0], float(bound(log_weights).mean()), rtol=0, atol=float(tolerance)
    )


def test_iwae_objective_at_one_sample_is_the_ordinary_bound() -> None:
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(MeanFieldHead, model.sites)
    x = model.sample_data(8, seed=3)
    values = {}
    for name in ("elbo", "iwae"):
        objective = BoundObjective(model, heads, training_bound(name))
        values[name] = objective(x, 1, torch.Generator().manual_seed(4), with_terms=False).bound
    # logsumexp of one value is that value (m + log 1): exactly the mean of one
    torch.testing.assert_close(values["iwae"], values["elbo"], rtol=0, atol=0)
    objective = BoundObjective(model, heads, training_bound("iwae"))
    several = objective(x, 8, torch.Generator().manual_seed(4), with_terms=False).bound
    log_weights = model(x, heads, 8, torch.Generator().manual_seed(4)).log_weights
    expected = importance_weighted_log_likelihood(log_weights).mean()  # the same computation
    torch.testing.assert_close(several, expected, rtol=0, atol=0)


def test_unknown_training_objective_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"trainer\.objective must be one of elbo, iwae"):
        training_bound("iwea")


# --- planar flow ----------------------------------------------------------------------------


def test_planar_flow_log_det_matches_autograd_in_float64() -> None:
    torch.manual_seed(0)
    spec = SiteSpec(context_dim=3, z_dim=3)
    head = PlanarFlowHead(spec, flow_length=5, init_scale=1.0).double()
    with torch.no_grad():  # far from the identity start
        head.flow_net.bias.normal_()
    context = torch.randn(2, 3, dtype=torch.float64)  # [B, C]
    sample = head(context, 4, torch.Generator().manual_seed(1))
    start = head.initial(context, 4, torch.Generator().manual_seed(1))  # the same z_0
    u_hat, w, b = head.flow_parameters(context)

    def flow(z0: Tensor, example: int) -> Tensor:
        z = z0
        for k in range(head.flow_length):
            z, _ = planar_map(z, u_hat[example, k], w[example, k], b[example, k])
        return z

    for s in range(4):
        for example in range(2):
            jacobian = torch.autograd.functional.jacobian(
                lambda z0, example=example: flow(z0, example), start.z[s, example]
            )
            log_det = torch.linalg.slogdet(jacobian).logabsdet
            torch.testing.assert_close(
                sample.log_q[s, example], start.log_q[s, example] - log_det, rtol=0, atol=1e-10
            )
            torch.testing.assert_close(sample.z[s, example], flow(start.z[s, example], example))


def test_planar_constraint_keeps_every_map_invertible() -> None:
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(2000, 4, generator=generator, dtype=torch.float64)
    u = torch.randn(2000, 4, generator=generator, dtype=torch.float64) * 20  # w^T u far below -1
    assert ((w * u).sum(-1) < -1).any()
    u_hat = constrained_direction(u, w)
    w_dot_u = (w * u).sum(-1)
    w_dot_u_hat = (w * u_hat).sum(-1)  # -1 + softplus(w^T u), up to rounding where it is -1
    assert (w_dot_u_hat >= -1 - 1e-14 * (1 + w_dot_u.abs())).all()
    assert (w_dot_u_hat[w_dot_u > -30] > -1).all()
    # Along w the map is a -> a + (w^T u^) tanh(a + b): strictly increasing, hence one to one
    # (orthogonal to w it is a shift); its Jacobian determinant is never negative.
    a = torch.linspace(-30, 30, 4001, dtype=torch.float64).unsqueeze(1)  # [G, 1]
    b = torch.randn(2000, generator=generator, dtype=torch.float64)
    image = a + w_dot_u_hat * torch.tanh(a + b)  # [G, N]
    assert (image.diff(dim=0) > 0).all()
    z = torch.randn(2000, 4, generator=generator, dtype=torch.float64) * 5
    _, log_det = planar_map(z, u_hat, w, b.unsqueeze(-1))
    assert torch.isfinite(log_det).all()


def test_planar_flow_starts_as_its_mean_field_base() -> None:
    torch.manual_seed(varied_seed(0))
    head = PlanarFlowHead(SiteSpec(context_dim=3, z_dim=2), flow_length=6, init_scale=0.0)
    context = torch.randn(5, 3)
    sample = head(context, 7, torch.Generator().manual_seed(2))
    start = head.initial(context, 7, torch.Generator().manual_seed(2))
    # u^ is zero up to the rounding of u and of softplus: each of the K maps moves z by at most
    # |u^| (|tanh| <= 1) and log q~ by log |1 + u^T w h'| <= about |u^| |w|, each addition
    # rounding by up to eps times the value it adds to
    with torch.no_grad():
        u_hat, w, _ = head.flow_parameters(context)
        step, largest_w = u_hat.norm(dim=-1).max().item(), w.norm(dim=-1).max().item()
        largest_z, largest_log_q = start.z.abs().max().item(), start.log_q.abs().max().item()
    assert step < 1e-6  # rounding only
    K, eps = head.flow_length, torch.finfo(torch.float32).eps
    z_tolerance = K * (step + eps * largest_z)
    log_q_tolerance = K * (2 * step * largest_w + eps * largest_log_q)
    torch.testing.assert_close(sample.z, start.z, atol=z_tolerance, rtol=0)
    torch.testing.assert_close(sample.log_q, start.log_q, atol=log_q_tolerance, rtol=0)


def test_planar_flow_refuses_a_negative_length() -> None:
    with pytest.raises(ValueError, match=r"inference\.flow_length"):
        PlanarFlowHead(SiteSpec(context_dim=1, z_dim=2), flow_length=-1)


# --- HVI ------------------------------------------------------------------------------------


def test_hvi_with_zero_leapfrog_steps_is_the_mean_field_head() -> None:
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    mean_field = build_heads(partial(MeanFieldHead, hidden_dims=(6,)), model.sites)
    hvi = build_heads(partial(HVIHead, leapfrog_steps=0, hidden_dims=(6,)), model.sites)
    hvi["z"].initial.load_state_dict(mean_field["z"].state_dict())
    x = model.sample_data(8, seed=3)
    ours = model(x, hvi, 5, torch.Generator().manual_seed(9))
    theirs = model(x, mean_field, 5, torch.Generator().manual_seed(9))
    torch.testing.assert_close(ours.log_weights, theirs.log_weights, rtol=0, atol=0)


def banana_log_joint(z: Tensor) -> Tensor:
    """A non-quadratic log density on z `[..., 2 D']`, `[...]`: its Hessian varies with z."""
    first, second = z.chunk(2, dim=-1)
    banana = 0.5 * first.pow(2) + 0.5 * (second - first.pow(2)).pow(2)
    return -(banana.sum(-1) + 0.1 * z.pow(4).sum(-1))


def leapfrog_setup():
    generator = torch.Generator().manual_seed(0)
    options = {"generator": generator, "dtype": torch.float64}
    step_sizes = 0.05 + 0.2 * torch.rand(4, 4, **options)  # [L, D], different per step and dim
    inverse_mass = 0.5 + torch.rand(4, **options)  # [D]
    z0, v0 = torch.randn(2, 4, **options).unbind(0)  # [D] each
    return step_sizes, inverse_mass, z0, v0


def test_leapfrog_is_volume_preserving_in_float64() -> None:
    step_sizes, inverse_mass, z0, v0 = leapfrog_setup()

    def trajectory(state: Tensor) -> Tensor:
        z, v = state.view(1, 1, 2, 4).unbind(2)  # [S=1, B=1, D] each
        z, v = leapfrog_trajectory(z, v, banana_log_joint, step_sizes, inverse_mass, True)
        return torch.cat([z, v], dim=-1).reshape(-1)

    jacobian = torch.autograd.functional.jacobian(trajectory, torch.cat([z0, v0]))  # [8, 8]
    assert not torch.allclose(jacobian, torch.eye(8, dtype=torch.float64), atol=0.1)
    torch.testing.assert_close(
        torch.linalg.det(jacobian), torch.tensor(1.0, dtype=torch.float64), rtol=0, atol=1e-10
    )


def test_leapfrog_is_reversible_in_float64() -> None:
    step_sizes, inverse_mass, z0, v0 = leapfrog_setup()
    z0, v0 = z0.view(1, 1, 4), v0.view(1, 1, 4)
    zL, vL = leapfrog_trajectory(z0, v0, banana_log_joint, step_sizes, inverse_mass, False)
    assert (zL - z0).abs().max() > 0.1
    back_z, back_v = leapfrog_trajectory(
        zL, -vL, banana_log_joint, step_sizes.flip(0), inverse_mass, False
    )
    torch.testing.assert_close(back_z, z0, rtol=0, atol=1e-12)
    torch.testing.assert_close(-back_v, v0, rtol=0, atol=1e-12)


def test_hvi_gradient_flows_through_the_leapfrog_steps() -> None:
    # float64 central differences of the bound, with the noise fixed, against autograd: the
    # leapfrog's grad log p(x, z) depends on the parameters through z (create_graph).
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(partial(HVIHead, leapfrog_steps=3, step_size=0.2), model.sites).double()
    x = model.sample_data(4, seed=3).double()

    def bound_value() -> Tensor:
        return model(x, heads, 3, torch.Generator().manual_seed(6)).log_weights.mean()

    head = heads["z"]
    parameters = {
        "initial mean": head.initial.parameter_net[0].bias,
        "step sizes": head.raw_step_size,
        "inverse mass": head.raw_inverse_mass,
    }
    heads.zero_grad()
    bound_value().backward()
    for name, parameter in parameters.items():
        analytic = parameter.grad.reshape(-1)[0]
        with torch.no_grad():
            flat = parameter.view(-1)
            flat[0] += 1e-6
            above = bound_value()
            flat[0] -= 2e-6
            below = bound_value()
            flat[0] += 1e-6
        numeric = (above - below) / 2e-6
        torch.testing.assert_close(analytic, numeric, rtol=1e-5, atol=1e-7, msg=name)


def test_hvi_evaluation_without_gradients_gives_the_same_weights() -> None:
    torch.manual_seed(0)
    model = LinearGaussianModel(x_dim=4, z_dim=2, noise=0.5, seed=0)
    heads = build_heads(FAMILIES["hvi"], model.sites)
    x = model.sample_data(8, seed=3)
    with_graph = model(x, heads, 6, torch.Generator().manual_seed(2)).log_weights
    with torch.no_grad():
        without = model(x, heads, 6, torch.Generator().manual_seed(2)).log_weights
    assert with_graph.requires_grad and not without.requires_grad
    # the same arithmetic, with and without the graph kept: bit for bit
    torch.testing.assert_close(with_graph.detach(), without, rtol=0, atol=0)


def test_hvi_refuses_sites_without_log_joint() -> None:
    with pytest.raises(ValueError, match=r"inference=hvi .* \(dlgm1, dlgm2\)"):
        HVIHead(SiteSpec(context_dim=3, z_dim=2))
    head = HVIHead(SiteSpec(context_dim=3, z_dim=2, offers_log_joint=True))
    with pytest.raises(ValueError, match="inference=hvi"):
        head(torch.randn(2, 3), 1)
    with pytest.raises(ValueError, match=r"inference\.leapfrog_steps"):
        HVIHead(SiteSpec(context_dim=3, z_dim=2, offers_log_joint=True), leapfrog_steps=-1)


# --- the site's log_joint -------------------------------------------------------------------


class LogJointRecorder(MeanFieldHead):
    """The mean-field head, keeping the `log_joint` the model passed (test instrumentation)."""

    def forward(self, context, n_samples, generator=None, log_joint=None):
        self.log_joint = log_joint
        return super().forward(context, n_samples, generator)


@pytest.mark.parametrize(
    ("latent_dims", "hidden_dims"), [((3,), ((12,),)), ((4, 2), ((12,), (6,)))]
)
def test_dlgm_offers_log_joint_equal_to_its_trace(latent_dims, hidden_dims) -> None:
    from vgp_bench.models.dlgm import DLGM

    torch.manual_seed(0)
    model = DLGM((1, 4, 4), latent_dims, hidden_dims)
    assert model.sites["z"].offers_log_joint
    heads = build_heads(LogJointRecorder, model.sites)
    x = torch.bernoulli(torch.full((3, 1, 4, 4), 0.4), generator=torch.Generator().manual_seed(1))
    trace = model(x, heads, 5, torch.Generator().manual_seed(2))
    log_joint = heads["z"].log_joint
    site = heads["z"](model.recognition_context(x), 5, torch.Generator().manual_seed(2))
    # at the trace's z, the same computation as the trace's: bit for bit
    torch.testing.assert_close(log_joint(site.z), trace.log_p, rtol=0, atol=0)
    assert log_joint(torch.randn(7, 3, sum(latent_dims))).shape == (7, 3)


@pytest.mark.parametrize(("objective", "expected"), [("elbo", -2.0), ("iwae", -1.0)])
def test_validation_bound_is_the_training_objective(objective, expected, tmp_path, monkeypatch):
    # IWAE's validation bound is the IS estimate with valid_samples = k, not the ELBO
    from tests.helpers import TINY, compose_config
    from vgp_bench.run.loop import epoch_evaluation
    from vgp_bench.run.loop.build import build_components
    from vgp_bench.run.loop.trainer import Trainer

    cfg = compose_config([*TINY, f"trainer.objective={objective}", "trainer.image_every=0"])
    trainer = Trainer(cfg, tmp_path, build_components(cfg))
    monkeypatch.setattr(
        epoch_evaluation, "evaluate_components", lambda *a, **k: Evaluation(nll=1.0, bound_nll=2.0)
    )
    trainer.end_of_epoch()
    assert trainer.state.history[-1]["valid_bound"] == expected
