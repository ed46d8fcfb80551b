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
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from vgp_bench.distributions import (
    positive_scale,
)
from vgp_bench.gp.cholesky import JitteredCholesky, cholesky_with_jitter
from vgp_bench.gp.conditional import (
    DenseOutputs,
    LowRankOutputs,
    VariationalOutputs,
    affine_projector,
    affine_weights,
    conditional_mean_variance,
)
from vgp_bench.gp.kernels import ARDKernel
from vgp_bench.inference.auxiliary import AuxiliaryModel
from vgp_bench.inference.base import (
    LogJoint,
    SiteSample,
    SiteSampler,
    SiteSpec,
    VariationalHead,
)
from vgp_bench.inference.vgp_data import VariationalData
from vgp_bench.inference.vgp_objectives import OBJECTIVES, standard_normal
from vgp_bench.nets import mlp, output_dim

INPUT_MODES = ("global", "amortized")
OUTPUT_MODES = ("dense", "low_rank", "shared_basis", "global")
SCALE_MODES = ("context", "gp", "tied")
PRIOR_MEANS = ("zero", "identity")
PAPER_AUXILIARIES = ("factorized", "conditional")
WARPS = ("gp", "linear")
AUX_CORRECTIONS = ("learned", "none")


class VGPHead(VariationalHead):
    """q(z | x) as a variational Gaussian process with an auxiliary model r (Sections 2.3-3.2).

    Options (docs/design.md, section 2):
    - `variational_data_size` m and `latent_input_dim` c (None: c = d, as the paper);
    - `inputs`: `global` learned S `[m, c]` (one m x m Cholesky per call) or `amortized`
      S(h) `[B, m, c]` per example (the paper's literal Section 3.2; one Cholesky each);
    - `outputs`: `dense` T(h) = a linear layer from the features to m x d_f (the paper's form),
      or `low_rank` T(h) = 1 t0(h)^T + U(h) V(h), U `[m, r]`, V `[r, d_f]`, all from the
      features; or `shared_basis` T(h) = 1 t0(h)^T + U V(h) with U `[m, r]` a global
      parameter; or `global` T `[m, d_f]`, one set of outputs shared by all examples.
      Under the zero prior mean, low_rank and shared_basis confine the warping of the mean to
      r + 1 directions (a sub-family, docs/design.md, section 2.5); dense and global do not;
    - `prior_mean`: `zero` (the paper's GP) or `identity`, an amortized linear prior mean:
      f = m(h) + s(h) * g(xi) with g ~ GP(xi, k) conditioned on (S, T(h)), so that
      E[f | xi] = m(h) + s(h) * (xi + w(xi)^T T(h)) and Var[f_j | xi] = s_j(h)^2 v(xi).
      With T = 0 this is the mean-field family (z = m + s xi + noise): the run starts as a VAE
      and the outputs T bend the warp where the bound gains. Needs c = d and the context-made
      scale; r(xi | x, z) then starts at the exact inverse of the linear warp;
    - `mean_field_scale`: sigma(h) from the context (`context`), or from the GP, which then
      outputs d_f = 2d values (mean and pre-softplus scale; needs a non-collapsed objective),
      or `tied` to the warp's scale, sigma = `noise_ratio` * s(h) (identity prior mean only):
      the spread of z then always passes through xi, so the optimizer cannot turn the VGP
      into a mean-field Gaussian by moving the variance from s(h) to sigma(h);
    - `objective` and `aux_samples` as in the module docstring; `paper_auxiliary` picks the
      r of the paper objective: `factorized` r(xi | x, z) r(f | x, z) (Section 3.2) or
      `conditional` r(xi | x, z) r(f | xi, x, z) (Eq. 6);
    - `hidden_dims`: an MLP on the context shared by the heads that make S(h), T(h), sigma(h);
      `aux_hidden_dims`: the MLPs of r;
    - `jitter` (relative to sigma^2_ard) grows x10 on a failed Cholesky up to `max_jitter`;
    - `warp`: `gp` (the family) or `linear`, a control with the GP taken out. Under the
      identity prior mean E[f | xi] = m(h) + s(h) xi; under the zero prior mean (the paper's
      form) E[f | xi] = [xi, 1] beta(h), beta the least-squares affine fit of T(h) on S (what
      a linear-kernel GP interpolates). Var[f | xi] = 0 in both, so q(z | x) is a Gaussian
      drawn, weighted and bounded exactly as the VGP is, from the same parametrization. What
      the VGP gains over it is what the GP adds; what it gains over the VAE is parametrization.
    - `aux_correction`: under the identity prior mean r(xi | x, z) is the exact inverse of the
      warp's linear part times a `learned` correction (its network), or that inverse alone
      (`none`): a diagnostic that separates what learning r does to training from the family.

    Zero prior mean: all t_n start near one linear function of the features (spread
    `init_output_spread`), S ~ N(0, I), omega = 1/c: z is then close to a mean-field Gaussian
    N(t0(h), s2 + sigma(h)^2) with a mild dependence on xi, and r(xi | .) starts at N(0, I).
    """

    def __init__(
        self,
        spec: SiteSpec,
        variational_data_size: int = 500,
        latent_input_dim: int | None = None,
        inputs: str = "global",
        outputs: str = "dense",
        outputs_rank: int = 32,
        objective: str = "collapsed",
        aux_samples: int = 0,
        mean_field_scale: str = "context",
        noise_ratio: float = 0.1,
        prior_mean: str = "zero",
        paper_auxiliary: str = "factorized",
        warp: str = "gp",
        aux_correction: str = "learned",
        hidden_dims: Sequence[int] = (),
        aux_hidden_dims: Sequence[int] = (256,),
        activation: str = "tanh",
        min_scale: float = 1e-4,
        kernel_variance: float = 1.0,
        kernel_inverse_lengthscale: float | None = None,
        init_output_spread: float = 0.1,
        init_noise_scale: float = 0.1,
        jitter: float = 1e-6,
        max_jitter: float = 1e-2,
    ) -> None:
        super().__init__(spec)
        self._cholesky_cache: tuple[tuple, JitteredCholesky] | None = None
        _check_choice("inference.objective", objective, tuple(OBJECTIVES))
        _check_choice("inference.inputs", inputs, INPUT_MODES)
        _check_choice("inference.outputs", outputs, OUTPUT_MODES)
        _check_choice("inference.mean_field_scale", mean_field_scale, SCALE_MODES)
        _check_choice("inference.prior_mean", prior_mean, PRIOR_MEANS)
        _check_choice("inference.paper_auxiliary", paper_auxiliary, PAPER_AUXILIARIES)
        _check_choice("inference.warp", warp, WARPS)
        _check_choice("inference.aux_correction", aux_correction, AUX_CORRECTIONS)
        if aux_correction == "none" and (prior_mean != "identity" or mean_field_scale == "gp"):
            raise ValueError(
                "inference.aux_correction=none (r fixed at the inverse of the linear warp) needs "
                "prior_mean=identity and mean_field_scale=context or tied; use learned"
            )
        if warp == "linear" and prior_mean == "zero" and mean_field_scale == "gp":
            raise ValueError(
                "inference.warp=linear under the zero prior mean needs mean_field_scale=context: "
                "the affine fit has no GP to make the scale"
            )
        if aux_samples < 0 or variational_data_size < 1 or outputs_rank < 1:
            raise ValueError(
                "inference.aux_samples must be >= 0, variational_data_size and outputs_rank >= 1"
            )
        if aux_samples > 0 and objective == "paper":
            raise ValueError(
                "inference.aux_samples > 0 needs objective=collapsed or hierarchical: the paper "
                "objective integrates f analytically and has no importance-weighted form"
            )
        if objective == "collapsed" and mean_field_scale == "gp":
            raise ValueError(
                "objective=collapsed needs a Gaussian z | xi, which a GP-made scale breaks; "
                "use objective=hierarchical with inference.mean_field_scale=gp"
            )
        c_given = int(latent_input_dim or spec.z_dim)
        if prior_mean == "identity" and (mean_field_scale == "gp" or c_given != spec.z_dim):
            raise ValueError(
                "inference.prior_mean=identity needs latent_input_dim = d (null) and "
                "mean_field_scale=context or tied; use prior_mean=zero for other shapes"
            )
        if mean_field_scale == "tied" and (prior_mean != "identity" or noise_ratio <= 0):
            raise ValueError(
                "inference.mean_field_scale=tied needs prior_mean=identity and noise_ratio > 0"
            )
        if init_noise_scale <= min_scale:
            raise ValueError(f"inference.init_noise_scale must exceed min_scale {min_scale}")
        self.objective = objective
        self.strategy = OBJECTIVES[objective]  # draws z and gives log q~ (vgp_objectives.py)
        self.paper_auxiliary = paper_auxiliary
        self.aux_samples = int(aux_samples)
        self.min_scale = min_scale
        self.jitter = jitter
        self.max_jitter = max_jitter
        self.z_dim = spec.z_dim
        self.latent_input_dim = c_given
        self.data_size = int(variational_data_size)
        self.f_dim = 2 * spec.z_dim if mean_field_scale == "gp" else spec.z_dim
        self.noise_ratio = float(noise_ratio) if mean_field_scale == "tied" else None
        self.prior_mean = prior_mean
        self.warp = warp
        self.aux_correction = aux_correction
        m, c, f_dim = self.data_size, self.latent_input_dim, self.f_dim
        # the identity prior mean starts with zero residual outputs: q is then mean-field
        spread = 0.0 if prior_mean == "identity" else init_output_spread

        self.kernel = ARDKernel(c, kernel_variance, kernel_inverse_lengthscale)
        self.feature_net = mlp(spec.context_dim, hidden_dims, None, activation)
        features = output_dim(spec.context_dim, hidden_dims)
        if inputs == "global":
            self.inputs = nn.Parameter(torch.randn(m, c))
        else:
            self.input_net = nn.Linear(features, m * c)
            with torch.no_grad():  # S(h) starts at N(0, I) draws, weakly dependent on h
                self.input_net.weight.mul_(init_output_spread)
                self.input_net.bias.normal_()
        if outputs == "dense":
            self.output_net = _tied_linear(features, m, f_dim, spread)
            if prior_mean == "identity":
                with torch.no_grad():
                    self.output_net.weight.zero_()
                    self.output_net.bias.zero_()
        elif outputs == "global":
            self.global_outputs = nn.Parameter(spread * torch.randn(m, f_dim))
        else:
            self.offset_net = nn.Linear(features, f_dim)
            if outputs == "low_rank":
                self.left_net = nn.Linear(features, m * outputs_rank)
            else:  # one basis over the m variational inputs, shared by all examples
                self.basis = nn.Parameter(torch.randn(m, outputs_rank))
            self.right_net = nn.Linear(features, outputs_rank * f_dim)
            with torch.no_grad():  # U V starts at the spread of the dense form
                self.right_net.weight.mul_(spread / math.sqrt(outputs_rank))
                self.right_net.bias.mul_(spread / math.sqrt(outputs_rank))
                if prior_mean == "identity":
                    self.offset_net.weight.zero_()
                    self.offset_net.bias.zero_()
        self.inputs_mode, self.outputs_mode, self.outputs_rank = inputs, outputs, int(outputs_rank)
        self.scale_net = nn.Linear(features, spec.z_dim) if mean_field_scale == "context" else None
        if prior_mean == "identity":
            self.location_net = nn.Linear(features, spec.z_dim)  # m(h)
            self.warp_scale_net = nn.Linear(features, spec.z_dim)  # s(h), pre-softplus
        if prior_mean == "identity" and self.scale_net is not None:
            with torch.no_grad():  # sigma starts small and constant: z ~ m + s xi at first
                self.scale_net.weight.zero_()
                raw = init_noise_scale - min_scale
                self.scale_net.bias.fill_(raw + math.log(-math.expm1(-raw)))  # softplus^-1
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
        if self.objective == "paper":
            return "collapsed (paper-trained head, its own r(xi | x, z)); E[w] = p(x)"
        if self.objective == "hierarchical" and self.aux_samples == 0:
            return "hierarchical, K = 0 (weights may have infinite variance; use aux_samples > 0)"
        return f"{self.objective}, K = {self.aux_samples}; E[w] = p(x)"

    def start_as_identity_warp(self, noise_scale: float) -> None:
        """Set T = S and the mean-field scale to `noise_scale`: z starts near xi + noise.

        For black-box fitting (no data): each z is then tied to its own latent input, and the
        target's gradient pulls the mapping apart where it has to (into separate modes, along
        a ridge); from the tied initialization (all t_n near one value) fits of two separated
        modes stop in a single broad Gaussian. Needs global inputs, dense outputs, the
        context-made scale, the zero prior mean and c = d; other configurations are refused.
        """
        if not (
            self.inputs_mode == "global"
            and self.outputs_mode == "dense"
            and self.scale_net is not None
            and self.latent_input_dim == self.z_dim
            and self.prior_mean == "zero"
        ):
            raise ValueError(
                "an identity start needs inputs=global, outputs=dense, prior_mean=zero, "
                "mean_field_scale=context and latent_input_dim = d (or pass identity_start=None)"
            )
        if noise_scale <= self.min_scale:
            raise ValueError(f"identity_start must exceed min_scale, got {noise_scale}")
        with torch.no_grad():
            self.output_net.weight.zero_()
            self.output_net.bias.copy_(self.inputs.reshape(-1))  # T = S, [M * d]
            self.scale_net.weight.zero_()
            raw = noise_scale - self.min_scale
            self.scale_net.bias.fill_(raw + math.log(-math.expm1(-raw)))  # softplus^-1

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
        thousands of samples without recomputing T, S or sigma.
        """
        if context.dim() not in (2, 3) or context.shape[-1] != self.spec.context_dim:
            raise ValueError(
                f"VGP head expects a context [B, {self.spec.context_dim}] or "
                f"[S, B, {self.spec.context_dim}], got {tuple(context.shape)}"
            )
        features = self.feature_net(context)  # [*batch, F]
        batch = features.shape[:-1]
        m, c, f_dim = self.data_size, self.latent_input_dim, self.f_dim
        if self.inputs_mode == "amortized":
            inputs = self.input_net(features).view(*batch, m, c)  # [*batch, M, c]
            cholesky = self.factorize(inputs)
        else:
            inputs = self.inputs  # [M, c]
            cholesky = self.global_cholesky()
        outputs: VariationalOutputs
        if self.outputs_mode == "dense":
            outputs = DenseOutputs(self.output_net(features).view(*batch, m, f_dim))
        elif self.outputs_mode == "global":
            outputs = DenseOutputs(self.global_outputs)  # [M, d_f], shared by the batch
        else:
            r = self.outputs_rank
            left = (
                self.left_net(features).view(*batch, m, r)
                if self.outputs_mode == "low_rank"
                else self.basis  # [M, r], global
            )
            outputs = LowRankOutputs(
                offset=self.offset_net(features),  # [*batch, d_f]
                left=left,
                right=self.right_net(features).view(*batch, r, f_dim),
            )
        scale = None
        if self.scale_net is not None:
            scale = positive_scale(self.scale_net(features), self.min_scale)  # [*batch, D]
        data = VariationalData(context, inputs, cholesky, outputs, scale)
        if self.warp == "linear" and self.prior_mean == "zero":
            data.affine = affine_projector(inputs)  # P: [c + 1, M] or [*batch, c + 1, M]
        if self.prior_mean == "identity":
            data.location = self.location_net(features)  # [*batch, D]
            data.warp_scale = positive_scale(self.warp_scale_net(features), self.min_scale)
            if self.noise_ratio is not None:  # tied: sigma = noise_ratio * s(h)
                data.scale = self.noise_ratio * data.warp_scale
        return data

    def factorize(self, inputs: Tensor) -> JitteredCholesky:
        """Cholesky of K_ss + jitter I for inputs `[M, c]` or `[*batch, M, c]`."""
        return cholesky_with_jitter(
            self.kernel(inputs, inputs),  # K_ss [M, M] or [*batch, M, M]
            self.kernel.variance,
            initial_jitter=self.jitter,
            max_jitter=self.max_jitter,
        )

    def global_cholesky(self) -> JitteredCholesky:
        """The factor of the global K_ss, computed once per minibatch and reused by every call.

        DRAW calls the head once per step; with global inputs K_ss is the same at every step,
        so it is factorized once. The cache is keyed on the parameters' versions (an optimizer
        step or a loaded state invalidates it) and on the grad mode, and a backward pass through
        the factor clears it (its graph is then spent).
        """
        parameters = [self.inputs, *self.kernel.parameters()]
        key = (
            tuple(parameter._version for parameter in parameters),
            torch.is_grad_enabled(),
            self.inputs.device,
            self.inputs.dtype,
        )
        if self._cholesky_cache is not None and self._cholesky_cache[0] == key:
            return self._cholesky_cache[1]
        cholesky = self.factorize(self.inputs)
        if cholesky.factor.requires_grad:
            cholesky.factor.register_hook(self._forget_cholesky)
        self._cholesky_cache = (key, cholesky)
        return cholesky

    def _forget_cholesky(self, gradient: Tensor) -> None:
        self._cholesky_cache = None

    def gp_moments(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead]` of the GP g(xi) | (S, T) (Eq. 4)."""
        return conditional_mean_variance(
            self.kernel,
            data.inputs,
            data.cholesky.factor,
            data.outputs,
            xi,
            data.cholesky.jitter,
        )

    def f_mean_variance(self, data: VariationalData, xi: Tensor) -> tuple[Tensor, Tensor]:
        """Mean `[*lead, d_f]` and variance `[*lead, 1 or d_f]` of q(f | xi) (Eq. 4, prior mean)."""
        if self.warp == "linear":  # the control, no GP: m + s xi, or the affine fit of (S, T)
            if data.affine is not None:
                linear = data.outputs.mean(affine_weights(data.affine, xi))  # [*lead, d_f]
            else:
                assert data.location is not None and data.warp_scale is not None
                linear = data.location + data.warp_scale * xi  # [*lead, D]
            return linear, torch.zeros_like(linear[..., :1])
        gp_mean, gp_variance = self.gp_moments(data, xi)
        gp_variance = gp_variance.unsqueeze(-1)  # [*lead, 1]
        if data.location is None or data.warp_scale is None:
            return gp_mean, gp_variance
        warped = data.location + data.warp_scale * (xi + gp_mean)  # m + s (xi + w^T T)
        return warped, data.warp_scale.pow(2) * gp_variance

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
        return mean, positive_scale(raw_scale, self.min_scale)

    def inverse_warp(self, data: VariationalData, z: Tensor) -> tuple[Tensor, Tensor] | None:
        """The exact posterior of xi given z under the linear part of the warp, or None.

        With z = m + s xi + tau eps per dimension, xi | z ~ N(s (z - m) / (s^2 + tau^2),
        tau^2 / (s^2 + tau^2)); tau^2 = sigma^2 + s^2 sigma^2_ard bounds the noise from above.
        r(xi | x, z) is this Gaussian corrected by its network, so it starts exact.
        """
        if data.location is None or data.warp_scale is None or data.scale is None:
            return None
        warp_variance = data.warp_scale.pow(2)
        noise_variance = data.scale.pow(2)
        if self.warp == "gp":
            noise_variance = noise_variance + warp_variance * self.kernel.variance
        total = warp_variance + noise_variance
        return data.warp_scale * (z - data.location) / total, (noise_variance / total).sqrt()

    def r_xi(self, data: VariationalData, z: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of r(xi | x, z), each `[..., c]`."""
        inverse = self.inverse_warp(data, z)
        if self.aux_correction == "none":
            assert inverse is not None, "aux_correction=none needs the identity prior mean"
            return inverse
        return self.auxiliary.xi_given_z(data.context, z, inverse)

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
        extras = {
            "jitter": data.cholesky.jitter.detach().max(),
            "cholesky_retries": data.cholesky.retries.max().to(context.dtype),
            "kernel_variance": self.kernel.variance.detach(),
            "kernel_inverse_lengthscale_mean": self.kernel.inverse_lengthscales.detach().mean(),
        }
        return SiteSample(z=draw.z, log_q=log_q, terms=terms, extras=extras)

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

    @torch.no_grad()
    def diagnostics(
        self, context: Tensor, n_draws: int = 256, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """How much z depends on xi: the warp statistics of docs/design.md, section 5.2, per call.

        Over `n_draws` latent inputs per example (contexts `[B, C]`; a per-sample `[S, B, C]`
        context uses its first sample):
        - `warp_share`: Var_xi[E[z | xi]] / E_xi[Var(z | xi)], averaged over examples and
          dimensions (0: mean-field in disguise);
        - `nonlinear_warp_share`: the same for the part of E[z | xi] no affine map of xi
          explains (0 for a linear warp, which is itself mean-field); the least-squares
          residual over its N - (c + 1) degrees of freedom, since an in-sample fit of c + 1
          coefficients absorbs a share (c + 1) / N of it (at least 2 (c + 1) draws are used);
        - `warp_rank`: the number of directions E[z | xi] moves in (singular values of the
          centred means above 1e-3 of the largest), averaged over examples;
        - `variance_dispersion`: Var_xi[Var(z | xi)] / E_xi[Var(z | xi)]^2, averaged over
          examples and dimensions: how much the spread of z changes with xi (0 for a constant
          spread; the GP variance s(h)^2 v(xi) makes q(z) a scale mixture even when the mean
          warp is affine);
        - `total_correlation`: 1/2 (sum log diag(Sigma) - log det Sigma) in nats, averaged over
          examples, for Sigma = L^T L + diag(E_xi Var(z | xi) + the nonlinear residual), L the
          affine part of the warp: what correlation between the coordinates of z is worth to
          the entropy (0 for a mean-field q; a non-diagonal affine warp makes q(z | x) a
          correlated Gaussian). The fitted slopes' own noise inflates L^T L by the trace of
          (X^T X)^-1 over the slopes times the residual covariance (X the draws' design, its
          intercept column included); that is subtracted and the result projected onto the
          positive semidefinite matrices (exact in expectation for residuals of one spread
          whatever xi; a nonlinear part that grows with |xi| leaves some of the inflation).
        """
        with torch.autocast(device_type=context.device.type, enabled=False):
            context = context[0] if context.dim() == 3 else context
            data = self.prepare(context.to(self.kernel.variance.dtype))
            batch = context.shape[0]
            n_draws = max(n_draws, 2 * (self.latent_input_dim + 1))  # a fit of c + 1 per D
            xi = torch.randn(
                (n_draws, batch, self.latent_input_dim),
                generator=generator,
                device=context.device,
                dtype=context.dtype,
            )
            f_mean, f_scale = self.f_moments(data, xi)  # [N, B, d_f]
            if data.scale is not None:
                mean, variance = f_mean, f_scale.pow(2) + data.scale.pow(2)
            else:  # the GP makes the scale: the mean-field mean is the first half of f
                mean, raw = f_mean.chunk(2, dim=-1)
                variance = f_scale[..., : self.z_dim].pow(2) + positive_scale(
                    raw, self.min_scale
                ).pow(2)
            centred = (mean - mean.mean(0)).double().movedim(1, 0)  # [B, N, D]
            variance = variance.double()  # [N, B, D]
            expected_variance = variance.mean(0)  # [B, D]
            share = centred.pow(2).sum(1) / (n_draws - 1) / expected_variance
            design = (
                torch.cat([torch.ones_like(xi[..., :1]), xi], dim=-1).double().movedim(1, 0)
            )  # [B, N, c + 1]
            coefficients = torch.linalg.lstsq(design, centred).solution  # [B, c + 1, D]
            residuals = centred - design @ coefficients  # [B, N, D]
            residual_covariance = residual_covariance_of_fit(residuals, design.shape[-1])
            residual = residual_covariance.diagonal(dim1=-2, dim2=-1)  # [B, D]
            nonlinear = residual / expected_variance
            dispersion = variance.var(0) / expected_variance.pow(2)  # [B, D]
            linear = coefficients[:, 1:, :]  # [B, c, D]: E[z | xi] ~ a + linear^T xi
            affine = debiased_affine_covariance(linear, design, residual_covariance)
            total_correlation = gaussian_total_correlation(
                affine + torch.diag_embed(expected_variance + residual)
            )  # [B]
            singular = torch.linalg.svdvals(centred)  # [B, min(N, D)]
            rank = (singular > 1e-3 * singular[:, :1]).sum(-1).double()
        return {
            "warp_share": float(share.mean()),
            "nonlinear_warp_share": float(nonlinear.mean()),
            "warp_rank": float(rank.mean()),
            "variance_dispersion": float(dispersion.mean()),
            "total_correlation": float(total_correlation.mean()),
        }


def residual_covariance_of_fit(residuals: Tensor, parameters: int) -> Tensor:
    """Covariance `[B, D, D]` of least-squares residuals `[B, N, D]` of a fit with `parameters`
    coefficients: their cross-products over N - parameters degrees of freedom (unbiased for
    residuals whose spread does not depend on the regressors)."""
    degrees_of_freedom = residuals.shape[-2] - parameters
    if degrees_of_freedom < 1:
        raise ValueError(
            f"the warp statistics fit {parameters} coefficients per coordinate to "
            f"{residuals.shape[-2]} draws of xi; use more draws than {parameters}"
        )
    return residuals.transpose(-2, -1) @ residuals / degrees_of_freedom


def debiased_affine_covariance(
    slopes: Tensor, design: Tensor, residual_covariance: Tensor
) -> Tensor:
    """L^T L `[B, D, D]` from fitted slopes L `[B, c, D]` without the slopes' noise.

    With Cov(L_k) = (X^T X)^-1_kk Psi for the design X `[B, N, c + 1]` (intercept first) and
    residual covariance Psi, E[L^T L] exceeds the true one by tr((X^T X)^-1 over the slopes) Psi;
    the difference is projected onto the positive semidefinite matrices, as L^T L is.
    """
    gram_inverse = torch.linalg.inv(design.transpose(-2, -1) @ design)  # [B, c + 1, c + 1]
    inflation = gram_inverse[..., 1:, 1:].diagonal(dim1=-2, dim2=-1).sum(-1)  # [B]
    raw = slopes.transpose(-2, -1) @ slopes - inflation[..., None, None] * residual_covariance
    eigenvalues, eigenvectors = torch.linalg.eigh(raw)
    return (eigenvectors * eigenvalues.clamp_min(0.0).unsqueeze(-2)) @ eigenvectors.transpose(
        -2, -1
    )


def gaussian_total_correlation(covariance: Tensor) -> Tensor:
    """1/2 (sum_i log Sigma_ii - log det Sigma) of covariances `[B, D, D]`, `[B]`: the KL from
    a Gaussian to the product of its marginals (0 exactly when Sigma is diagonal)."""
    log_diagonal = covariance.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 0.5 * (log_diagonal - torch.linalg.slogdet(covariance).logabsdet)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _tied_linear(in_dim: int, rows: int, width: int, spread: float) -> nn.Linear:
    """Linear in_dim -> rows * width whose rows start equal up to a relative `spread`."""
    layer = nn.Linear(in_dim, rows * width)
    common = nn.Linear(in_dim, width)
    with torch.no_grad():
        weight = layer.weight.view(rows, width, in_dim)
        weight.copy_(common.weight + spread * weight)
        bias = layer.bias.view(rows, width)
        bias.copy_(common.bias + spread * bias)
    return layer
