"""The variational Gaussian process family (inference=vgp), Sections 2.3 and 3 of the paper.

z is drawn by warping a latent input xi ~ N(0, I_c) with a GP conditioned on variational data
(S, T(h)) and adding mean-field noise:

    xi ~ N(0, I_c),   f | xi ~ N(mu(xi), s2(xi) I_d) (Eq. 4),   z | f ~ N(f, diag(sigma(h)^2)).

The head returns log q~, the estimate of log q(z) whose subtraction from log p(x, z) is the
bound (docs/design.md, section 3), for one of three objectives (strategies in `vgp_objectives.py`):

- `collapsed`:    log q(z | xi) + log q(xi) - log r(xi | x, z), with f integrated out,
                  q(z | xi) = N(mu(xi), diag(s2(xi) + sigma^2));
- `hierarchical`: log q(z | f) + log q(f | xi) + log q(xi) - log r(xi | x, z) - log r(f | xi, x, z);
- `paper`:        log q(z | f) + KL(q(f | xi) || r(f | x, z)) + log q(xi) - log r(xi | x, z)
                  (Eq. 7 as printed, r factorized over (xi, f); looser, kept for fidelity).

With `aux_samples = K > 0` (collapsed or hierarchical) log q~ is the importance-weighted
hierarchical estimate of Sobolev & Vetrov (2019),
log (1/(K+1)) sum_k q(z, psi_k) / r(psi_k | x, z), psi_0 the draw that made z and psi_1..K ~ r.

The head is composed of parts, one per option value: the variational inputs and outputs
(`vgp_parts.py`), the prior mean, the warp and the mean-field scale (`vgp_warp.py`), the
correction of r (`auxiliary.py`); its warp statistics are `vgp_statistics.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor, nn

from vgp_bench.distributions import check_scale_link, positive_scale
from vgp_bench.errors import ConfigError
from vgp_bench.gp.cholesky import JitteredCholesky
from vgp_bench.gp.conditional import conditional_mean_variance
from vgp_bench.gp.fused import factor_kernel_matrix
from vgp_bench.gp.kernels import ARDKernel
from vgp_bench.inference.auxiliary import AUX_CORRECTIONS, AuxiliaryModel
from vgp_bench.inference.base import (
    LogJoint,
    SiteSample,
    SiteSampler,
    SiteSpec,
    VariationalHead,
)
from vgp_bench.inference.vgp_data import VariationalData
from vgp_bench.inference.vgp_objectives import (
    OBJECTIVES,
    PAPER_AUXILIARIES,
    standard_normal,
)
from vgp_bench.inference.vgp_options import DEFAULTS, choose, refuse_combinations
from vgp_bench.inference.vgp_parts import (
    VARIATIONAL_INPUTS,
    VARIATIONAL_OUTPUTS,
    DenseOutputNet,
    GlobalInputs,
    VariationalInputs,
    VariationalOutputsNet,
)
from vgp_bench.inference.vgp_statistics import warp_statistics
from vgp_bench.inference.vgp_warp import (
    MEAN_FIELD_SCALES,
    PRIOR_MEANS,
    WARPS,
    ContextScale,
    MeanFieldScale,
    PriorMean,
    Warp,
    ZeroPriorMean,
)
from vgp_bench.nets import initialize, mlp, output_dim

Part = TypeVar("Part", bound=nn.Module)


@dataclass(frozen=True)
class VGPParts:
    """The parts the options chose. Kept off the module tree: the head registers each part's
    parameters and layers under their own names (`VGPHead._register_members`), so the state
    dict and the parameter order are those of checkpoints written before the parts existed
    (an optimizer's state is indexed by that order)."""

    inputs: VariationalInputs  # inference.inputs
    outputs: VariationalOutputsNet  # inference.outputs
    mean_field_scale: MeanFieldScale  # inference.mean_field_scale
    prior_mean: PriorMean  # inference.prior_mean
    warp: Warp  # inference.warp


class VGPHead(VariationalHead):
    """q(z | x) as a variational Gaussian process with an auxiliary model r (Sections 2.3-3.2).

    Options (docs/design.md, section 2), whose defaults are configs/inference/vgp.yaml's (the
    project's best configuration; tests/test_vgp_options.py holds them equal); the paper's form is
    configs/inference/vgp_form/paper.yaml over them:
    - `variational_data_size` m and `latent_input_dim` c (None: c = d, as the paper);
    - `inputs`: `global` S `[m, c]` or `amortized` S(h) (vgp_parts.py, section 2.4);
    - `outputs`: `dense` T(h) (the paper's form), `global` T, `low_rank` or `shared_basis`
      T(h) = 1 t0(h)^T + U V(h) of rank `outputs_rank` (vgp_parts.py, section 2.5);
    - `prior_mean`: `zero` (the paper's GP) or `identity`, f = m(h) + s(h) g(xi), which starts
      as the mean-field family (T = 0, sigma = `init_noise_scale`) and bends the warp where the
      bound gains; needs c = d and no GP-made scale (vgp_warp.py, section 2.6);
    - `mean_field_scale`: sigma(h) from the `context`, from the `gp` (d_f = 2d; not with the
      collapsed objective) or `tied` to the warp, sigma = `noise_ratio` s(h) (section 2.7);
    - `warp`: `gp` (the family) or `linear`, the control with the GP taken out (section 2.8);
    - `aux_correction`: under the identity prior mean r(xi | x, z) is the inverse of the linear
      warp times a `learned` correction or that inverse alone (`none`; auxiliary.py);
    - `objective`, `aux_samples` as in the module docstring; `paper_auxiliary` picks the r of
      the paper objective: `factorized` (Section 3.2) or `conditional` (Eq. 6);
    - `hidden_dims`: an MLP on the context shared by the parts; `aux_hidden_dims`: r's MLPs;
    - `jitter` (relative to sigma^2_ard) grows x10 on a failed Cholesky up to `max_jitter`;
    - `scale_link` (softplus or exp) makes s(h) and sigma(h) positive; `init` (default or
      glorot_uniform) starts the feature MLP, m(h), s(h) and sigma(h), not r or S, T.

    Zero prior mean: all t_n start near one linear function of the features (spread
    `init_output_spread`), S ~ N(0, I), omega = 1/c: z is then close to a mean-field Gaussian
    N(t0(h), s2 + sigma(h)^2) with a mild dependence on xi, and r(xi | .) starts at N(0, I).
    """

    def __init__(
        self,
        spec: SiteSpec,
        variational_data_size: int = DEFAULTS.variational_data_size,
        latent_input_dim: int | None = DEFAULTS.latent_input_dim,
        inputs: str = DEFAULTS.inputs,
        outputs: str = DEFAULTS.outputs,
        outputs_rank: int = DEFAULTS.outputs_rank,
        objective: str = DEFAULTS.objective,
        aux_samples: int = DEFAULTS.aux_samples,
        mean_field_scale: str = DEFAULTS.mean_field_scale,
        noise_ratio: float = DEFAULTS.noise_ratio,
        prior_mean: str = DEFAULTS.prior_mean,
        paper_auxiliary: str = DEFAULTS.paper_auxiliary,
        warp: str = DEFAULTS.warp,
        aux_correction: str = DEFAULTS.aux_correction,
        hidden_dims: Sequence[int] = DEFAULTS.hidden_dims,
        aux_hidden_dims: Sequence[int] = DEFAULTS.aux_hidden_dims,
        activation: str = DEFAULTS.activation,
        min_scale: float = DEFAULTS.min_scale,
        kernel_variance: float = DEFAULTS.kernel_variance,
        kernel_inverse_lengthscale: float | None = DEFAULTS.kernel_inverse_lengthscale,
        init_output_spread: float = DEFAULTS.init_output_spread,
        init_noise_scale: float = DEFAULTS.init_noise_scale,
        jitter: float = DEFAULTS.jitter,
        max_jitter: float = DEFAULTS.max_jitter,
        scale_link: str = DEFAULTS.scale_link,
        init: str = DEFAULTS.init,
    ) -> None:
        super().__init__(spec)
        check_scale_link(scale_link, "inference.scale_link")
        self.strategy = choose("inference.objective", objective, OBJECTIVES)  # vgp_objectives
        inputs_part = choose("inference.inputs", inputs, VARIATIONAL_INPUTS)
        outputs_part = choose("inference.outputs", outputs, VARIATIONAL_OUTPUTS)
        scale_part = choose("inference.mean_field_scale", mean_field_scale, MEAN_FIELD_SCALES)
        prior_mean_part = choose("inference.prior_mean", prior_mean, PRIOR_MEANS)
        choose("inference.paper_auxiliary", paper_auxiliary, PAPER_AUXILIARIES)
        warp_part = choose("inference.warp", warp, WARPS)
        self.r_correction = choose("inference.aux_correction", aux_correction, AUX_CORRECTIONS)
        refuse_combinations(
            spec,
            variational_data_size=variational_data_size,
            latent_input_dim=latent_input_dim,
            outputs_rank=outputs_rank,
            objective=objective,
            aux_samples=aux_samples,
            mean_field_scale=mean_field_scale,
            noise_ratio=noise_ratio,
            prior_mean=prior_mean,
            warp=warp,
            aux_correction=aux_correction,
            min_scale=min_scale,
            init_noise_scale=init_noise_scale,
        )
        self.aux_samples = int(aux_samples)
        self.min_scale, self.scale_link = min_scale, scale_link
        self.jitter = jitter
        self.max_jitter = max_jitter
        self.z_dim = spec.z_dim
        self.latent_input_dim = int(latent_input_dim or spec.z_dim)
        self.data_size = int(variational_data_size)
        self.f_dim = scale_part.gp_outputs_per_latent * spec.z_dim
        self.inputs_mode, self.outputs_mode, self.outputs_rank = inputs, outputs, int(outputs_rank)
        m, c, f_dim = self.data_size, self.latent_input_dim, self.f_dim
        # the identity prior mean starts with zero residual outputs: q is then mean-field
        starts_mean_field = prior_mean_part.starts_mean_field
        spread = 0.0 if starts_mean_field else init_output_spread

        # created in this order: the parameters' initial values are these draws of torch's RNG
        self.kernel = ARDKernel(c, kernel_variance, kernel_inverse_lengthscale)
        self.feature_net = mlp(spec.context_dim, hidden_dims, None, activation)
        features = output_dim(spec.context_dim, hidden_dims)
        parts = VGPParts(
            inputs=self._register_members(inputs_part(features, m, c, init_output_spread)),
            outputs=self._register_members(
                outputs_part(features, m, f_dim, self.outputs_rank, spread, starts_mean_field)
            ),
            mean_field_scale=self._register_members(
                scale_part(features, spec.z_dim, noise_ratio, min_scale, scale_link)
            ),
            prior_mean=self._register_members(
                prior_mean_part(features, spec.z_dim, min_scale, scale_link)
            ),
            warp=warp_part(),
        )
        self.parts = parts
        self.auxiliary = AuxiliaryModel(
            spec.context_dim,
            spec.z_dim,
            c,
            f_dim,
            self.strategy.auxiliary_structure(paper_auxiliary),
            aux_hidden_dims,
            activation,
            min_scale,
        )
        for net in (self.feature_net, parts.mean_field_scale, parts.prior_mean):
            initialize(net, init, "inference.init")  # where the VAE's q stands; r keeps its own
        if starts_mean_field:  # sigma starts small and constant: z ~ m + s xi at first
            parts.mean_field_scale.start_at(init_noise_scale)

    def _register_members(self, part: Part) -> Part:
        """Register `part`'s parameters and layers on the head under their own names."""
        for name, parameter in part.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, module in part.named_children():
            self.add_module(name, module)
        return part

    has_diagnostics = True
    has_auxiliary_samples = True

    @contextmanager
    def auxiliary_samples(self, count: int) -> Iterator[None]:
        """Within the block, log q~ is importance-weighted over `count` samples of r (K)."""
        saved, self.aux_samples = self.aux_samples, int(count)
        try:
            yield
        finally:
            self.aux_samples = saved

    @property
    def evaluation_weight(self) -> str | None:
        """Which importance weight evaluation uses (recorded in metrics.json)."""
        return self.strategy.evaluation_weight(self.aux_samples)

    def diagnostics(
        self, context: Tensor, n_draws: int = 256, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """The warp statistics of docs/design.md, section 5.2 (vgp_statistics.py)."""
        return warp_statistics(self, context, n_draws, generator)

    def start_as_identity_warp(self, noise_scale: float) -> None:
        """Set T = S and the mean-field scale to `noise_scale`: z starts near xi + noise.

        For black-box fitting (no data): each z is then tied to its own latent input, and the
        target's gradient pulls the mapping apart where it has to (into separate modes, along
        a ridge); from the tied initialization (all t_n near one value) fits of two separated
        modes stop in a single broad Gaussian. Needs global inputs, dense outputs, the
        context-made scale, the zero prior mean and c = d; other configurations are refused.
        """
        inputs, outputs, scale = self.parts.inputs, self.parts.outputs, self.parts.mean_field_scale
        if not (
            isinstance(inputs, GlobalInputs)
            and isinstance(outputs, DenseOutputNet)
            and isinstance(scale, ContextScale)
            and self.latent_input_dim == self.z_dim
            and isinstance(self.parts.prior_mean, ZeroPriorMean)
        ):
            raise ConfigError(
                "an identity start needs inputs=global, outputs=dense, prior_mean=zero, "
                "mean_field_scale=context and latent_input_dim = d (or pass identity_start=None)"
            )
        if noise_scale <= self.min_scale:
            raise ValueError(f"identity_start must exceed min_scale, got {noise_scale}")
        outputs.start_at(inputs.inputs)  # T = S
        scale.start_at(noise_scale)

    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,  # not needed: z does not depend on p
    ) -> SiteSample:
        # the GP algebra (Cholesky, triangular solves) stays float32 under bf16 autocast
        with torch.autocast(device_type=context.device.type, enabled=False):
            dtype = self.kernel.variance.dtype  # the head's own precision (float32 or 64)
            return self.sample(self.prepare(context.to(dtype)), n_samples, generator)

    def sampler(self, context: Tensor) -> SiteSampler:
        """The variational data, Cholesky factor and scales of `context` made once, then
        draws chunk after chunk: the same numbers as `forward` per chunk, without redoing T(h),
        L^{-1} T and the rest for every chunk of an importance-sampled evaluation."""
        with torch.autocast(device_type=context.device.type, enabled=False):
            data = self.prepare(context.to(self.kernel.variance.dtype))

        def draw(
            n_samples: int,
            generator: torch.Generator | None = None,
            log_joint: LogJoint | None = None,  # not needed: z does not depend on p
        ) -> SiteSample:
            with torch.autocast(device_type=context.device.type, enabled=False):
                return self.sample(data, n_samples, generator)

        return draw

    def prepare(self, context: Tensor) -> VariationalData:
        """Variational data, Cholesky factor and mean-field scale for a `[B, C]`/`[S, B, C]` input.

        Everything per example is computed here, once per call: IS evaluation then draws
        thousands of samples without recomputing T, S or sigma. Each part adds its piece.
        """
        if context.dim() not in (2, 3) or context.shape[-1] != self.spec.context_dim:
            raise ValueError(
                f"VGP head expects a context [B, {self.spec.context_dim}] or "
                f"[S, B, {self.spec.context_dim}], got {tuple(context.shape)}"
            )
        parts = self.parts
        features = self.feature_net(context)  # [*batch, F]
        inputs, cholesky = parts.inputs.inputs_and_factor(features, self.kernel, self.factorize)
        outputs = parts.outputs(features)  # T: [*batch or (), M, d_f]
        scale = parts.mean_field_scale.from_features(features)  # [*batch, D] or None
        data = VariationalData(context, inputs, cholesky, outputs, scale)
        parts.warp.prepare(data, parts.prior_mean)
        parts.prior_mean.prepare(features, data)
        parts.mean_field_scale.after_prior_mean(data)
        return data

    def factorize(self, inputs: Tensor) -> JitteredCholesky:
        """Cholesky of K_ss + jitter I for inputs `[M, c]` or `[*batch, M, c]`, made without
        gradients: they reach K_ss by the conditional's own backward (gp/fused.py)."""
        return factor_kernel_matrix(self.kernel, inputs, self.jitter, self.max_jitter)

    def gp_moments(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead]` of the GP g(xi) | (S, T) (Eq. 4)."""
        return conditional_mean_variance(
            self.kernel,
            data.inputs,
            data.cholesky.factor,
            data.outputs,
            xi,
            data.cholesky.jitter,
            data.route_for(xi),
            data.cholesky.matrix,
        )

    def f_mean_variance(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead, 1 or d_f]` of q(f | xi) (Eq. 4, prior mean)."""
        return self.parts.warp.f_mean_variance(data, xi, self.parts.prior_mean, self.gp_moments)

    def f_moments(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of q(f | xi), each `[*lead, d_f]`."""
        mean, variance = self.f_mean_variance(data, xi)
        return mean, variance.sqrt().expand_as(mean)

    def z_moments(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of q(z | xi) = N(E[f | xi], Var[f | xi] + sigma^2), f integrated out."""
        assert data.scale is not None, "a collapsed q(z | xi) needs the context-made scale"
        mean, variance = self.f_mean_variance(data, xi)
        return mean, (variance + data.scale.pow(2)).sqrt()

    def sample_f(
        self, f_mean: Tensor, f_scale: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """f ~ N(mean, diag(scale^2)) given the moments of q(f | xi), `[*lead, d_f]`."""
        noise = torch.randn(
            f_mean.shape, generator=generator, device=f_mean.device, dtype=f_mean.dtype
        )
        return f_mean + f_scale * noise

    def mean_field(self, data: VariationalData, f: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of q(z | f), each `[*lead, D]`."""
        if data.scale is not None:
            return f, data.scale
        mean, raw_scale = f.chunk(2, dim=-1)
        return mean, positive_scale(raw_scale, self.min_scale, self.scale_link)

    def inverse_warp(self, data: VariationalData, z: Tensor) -> tuple[Tensor, Tensor] | None:
        """The exact posterior of xi given z under the linear part of the warp, or None (the
        zero prior mean): r(xi | x, z) is this Gaussian corrected by its network, so it starts
        exact (vgp_warp.IdentityPriorMean.inverse)."""
        kernel = self.kernel if self.parts.warp.uses_gp else None
        return self.parts.prior_mean.inverse(data, z, kernel)

    def r_xi(self, data: VariationalData, z: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of r(xi | x, z), each `[..., c]`."""
        inverse = self.inverse_warp(data, z)
        return self.r_correction(self.auxiliary, data.context, z, inverse)

    def sample(
        self, data: VariationalData, n_samples: int, generator: torch.Generator | None = None
    ) -> SiteSample:
        """Draw z `[S, B, D]` with log q~ `[S, B]` for the configured objective.

        In evaluation mode a paper-trained head returns the collapsed weight (its Eq. 7 weight
        has E[w] < p(x)); the family is the collapsed one, so z is drawn the same way.
        """
        context = data.context
        batch = context.shape[:-1]
        if len(batch) == 2 and batch[0] != n_samples:
            raise ValueError(f"a per-sample context needs S = {n_samples}, got {batch[0]}")
        objective = self.strategy if self.training else self.strategy.for_evaluation()
        xi = standard_normal((n_samples, batch[-1], self.latent_input_dim), context, generator)
        draw = objective.draw(self, data, xi, generator)  # xi: [S, B, c]
        log_q, terms = draw.log_ratio, draw.terms
        if self.aux_samples > 0:
            terms["log_q_single_sample"] = log_q
            log_q = self.importance_weighted_log_q(data, draw.z, draw.r_xi, log_q, generator)
        extras = self.extras(data) if self.reports_extras else {}
        return SiteSample(z=draw.z, log_q=log_q, terms=terms, extras=extras)

    def extras(self, data: VariationalData) -> dict[str, Tensor]:
        """The pass's diagnostics for logging: jitter, Cholesky retries and the kernel."""
        return {
            "jitter": data.cholesky.jitter.detach().max(),
            "cholesky_retries": data.cholesky.retries.max().to(data.context.dtype),
            "kernel_variance": self.kernel.variance.detach(),
            "kernel_inverse_lengthscale_mean": self.kernel.inverse_lengthscales.detach().mean(),
        }

    def importance_weighted_log_q(
        self,
        data: VariationalData,
        z: Tensor,
        r_xi: tuple[Tensor, Tensor],
        log_ratio_drawn: Tensor,
        generator: torch.Generator | None = None,
        count: int | None = None,
    ) -> Tensor:
        """log (1/(K+1)) sum_k q(z, psi_k) / r(psi_k | x, z), psi_1..K ~ r, `[S, B]`.

        `log_ratio_drawn` is the k = 0 term, for the psi that made z (Sobolev & Vetrov 2019);
        `count` overrides K = `aux_samples` (the auxiliary-gap diagnostic).
        """
        count = self.aux_samples if count is None else int(count)
        r_xi_mean, r_xi_scale = r_xi  # [S, B, c]
        noise = standard_normal((count, *r_xi_mean.shape), z, generator)
        xi = r_xi_mean + r_xi_scale * noise  # [K, S, B, c]
        log_ratio = self.strategy.psi_log_ratios(self, data, z, xi, r_xi, generator)  # [K, S, B]
        all_ratios = torch.cat([log_ratio_drawn.unsqueeze(0), log_ratio], dim=0)  # [K+1, S, B]
        return torch.logsumexp(all_ratios, dim=0) - math.log(count + 1)
