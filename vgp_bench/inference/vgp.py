"""The variational Gaussian process family (inference=vgp), Sections 2.3 and 3 of the paper.

z is drawn by warping a latent input xi ~ N(0, I_c) with a GP conditioned on variational data
(S, T(h)) and adding mean-field noise:

    xi ~ N(0, I_c),   f | xi ~ N(mu(xi), s2(xi) I_d) (Eq. 4),   z | f ~ N(f, diag(sigma(h)^2)).

The head returns log q~, the estimate of log q(z) whose subtraction from log p(x, z) is the
bound (DESIGN.md section 2), for one of three objectives:

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
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vgp_bench.distributions import (
    normal_kl,
    normal_log_prob,
    positive_scale,
    standard_normal_log_prob,
)
from vgp_bench.gp.cholesky import JitteredCholesky, cholesky_with_jitter
from vgp_bench.gp.conditional import (
    DenseOutputs,
    LowRankOutputs,
    VariationalOutputs,
    conditional_mean_variance,
)
from vgp_bench.gp.kernels import ARDKernel
from vgp_bench.inference.auxiliary import AuxiliaryModel
from vgp_bench.inference.base import LogJoint, SiteSample, SiteSpec, VariationalHead
from vgp_bench.nets import mlp, output_dim

OBJECTIVES = ("collapsed", "hierarchical", "paper")
INPUT_MODES = ("global", "amortized")
OUTPUT_MODES = ("dense", "low_rank", "shared_basis")
SCALE_MODES = ("context", "gp")
AUXILIARY_STRUCTURE = {"collapsed": "xi", "hierarchical": "xi_then_f", "paper": "factorized"}


@dataclass
class VariationalData:
    """What q needs for one forward call: computed once per example for a `[B, C]` context,
    once per sample and example for `[S, B, C]` (the batch shape below)."""

    context: Tensor  # [*batch, C], batch = (B,) or (S, B)
    inputs: Tensor  # S: [M, c] global, [*batch, M, c] amortized
    cholesky: JitteredCholesky  # of K_ss + jitter I: factor [M, M] or [*batch, M, M]
    outputs: VariationalOutputs  # T: [*batch, M, d_f]
    scale: Tensor | None  # mean-field sigma [*batch, D]; None when the GP outputs it


class VGPHead(VariationalHead):
    """q(z | x) as a variational Gaussian process with an auxiliary model r (Sections 2.3-3.2).

    Options (DESIGN.md section 2):
    - `variational_data_size` m and `latent_input_dim` c (None: c = d, as the paper);
    - `inputs`: `global` learned S `[m, c]` (one m x m Cholesky per call) or `amortized`
      S(h) `[B, m, c]` per example (the paper's literal Section 3.2; one Cholesky each);
    - `outputs`: `dense` T(h) = a linear layer from the features to m x d_f (the paper's form),
      or `low_rank` T(h) = 1 t0(h)^T + U(h) V(h), U `[m, r]`, V `[r, d_f]`, all from the
      features: d_f + r (m + d_f) numbers per example and a mean that never forms T;
      or `shared_basis` T(h) = 1 t0(h)^T + U V(h) with U `[m, r]` a global parameter: only
      d_f + r d_f numbers per example, and the w^T U projection is shared by the batch;
    - `mean_field_scale`: sigma(h) from the context (`context`), or from the GP, which then
      outputs d_f = 2d values (mean and pre-softplus scale; needs a non-collapsed objective);
    - `objective` and `aux_samples` as in the module docstring;
    - `hidden_dims`: an MLP on the context shared by the heads that make S(h), T(h), sigma(h);
      `aux_hidden_dims`: the MLPs of r;
    - `jitter` (relative to sigma^2_ard) grows x10 on a failed Cholesky up to `max_jitter`.

    At initialization all t_n start near one linear function of the features (spread
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
        hidden_dims: Sequence[int] = (),
        aux_hidden_dims: Sequence[int] = (256,),
        activation: str = "tanh",
        min_scale: float = 1e-4,
        kernel_variance: float = 1.0,
        kernel_inverse_lengthscale: float | None = None,
        init_output_spread: float = 0.1,
        jitter: float = 1e-6,
        max_jitter: float = 1e-2,
    ) -> None:
        super().__init__(spec)
        self.last_extras: dict[str, Tensor] = {}
        self._cholesky_cache: tuple[tuple, JitteredCholesky] | None = None
        _check_choice("inference.objective", objective, OBJECTIVES)
        _check_choice("inference.inputs", inputs, INPUT_MODES)
        _check_choice("inference.outputs", outputs, OUTPUT_MODES)
        _check_choice("inference.mean_field_scale", mean_field_scale, SCALE_MODES)
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
        self.objective = objective
        self.aux_samples = int(aux_samples)
        self.min_scale = min_scale
        self.jitter = jitter
        self.max_jitter = max_jitter
        self.z_dim = spec.z_dim
        self.latent_input_dim = int(latent_input_dim or spec.z_dim)
        self.data_size = int(variational_data_size)
        self.f_dim = spec.z_dim if mean_field_scale == "context" else 2 * spec.z_dim
        m, c, f_dim = self.data_size, self.latent_input_dim, self.f_dim

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
            self.output_net = _tied_linear(features, m, f_dim, init_output_spread)
        else:
            self.offset_net = nn.Linear(features, f_dim)
            if outputs == "low_rank":
                self.left_net = nn.Linear(features, m * outputs_rank)
            else:  # one basis over the m variational inputs, shared by all examples
                self.basis = nn.Parameter(torch.randn(m, outputs_rank))
            self.right_net = nn.Linear(features, outputs_rank * f_dim)
            with torch.no_grad():  # U V starts at the spread of the dense form
                self.right_net.weight.mul_(init_output_spread / math.sqrt(outputs_rank))
                self.right_net.bias.mul_(init_output_spread / math.sqrt(outputs_rank))
        self.inputs_mode, self.outputs_mode, self.outputs_rank = inputs, outputs, int(outputs_rank)
        self.scale_net = nn.Linear(features, spec.z_dim) if mean_field_scale == "context" else None
        self.auxiliary = AuxiliaryModel(
            spec.context_dim,
            spec.z_dim,
            c,
            f_dim,
            AUXILIARY_STRUCTURE[objective],
            aux_hidden_dims,
            activation,
            min_scale,
        )

    def start_as_identity_warp(self, noise_scale: float) -> None:
        """Set T = S and the mean-field scale to `noise_scale`: z starts near xi + noise.

        For black-box fitting (no data): each z is then tied to its own latent input, and the
        target's gradient pulls the mapping apart where it has to (into separate modes, along
        a ridge); from the tied initialization (all t_n near one value) fits of two separated
        modes stop in a single broad Gaussian. Needs global inputs, dense outputs, the
        context-made scale and c = d; other configurations are refused.
        """
        if not (
            self.inputs_mode == "global"
            and self.outputs_mode == "dense"
            and self.scale_net is not None
            and self.latent_input_dim == self.z_dim
        ):
            raise ValueError(
                "an identity start needs inputs=global, outputs=dense, "
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
        else:
            inputs = self.inputs  # [M, c]
        if self.inputs_mode == "global":
            cholesky = self.global_cholesky()
        else:
            cholesky = self.factorize(inputs)
        outputs: VariationalOutputs
        if self.outputs_mode == "dense":
            outputs = DenseOutputs(self.output_net(features).view(*batch, m, f_dim))
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
        return VariationalData(context, inputs, cholesky, outputs, scale)

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
        """Mean `[*lead, d_f]` and variance `[*lead]` of f(xi) | variational data (Eq. 4)."""
        return conditional_mean_variance(
            self.kernel,
            data.inputs,
            data.cholesky.factor,
            data.outputs,
            xi,
            data.cholesky.jitter,
        )

    def sample_f(
        self, f_mean: Tensor, f_variance: Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """f ~ N(mean, variance I) given the moments of Eq. 4; f and its scale, `[*lead, d_f]`."""
        f_scale = f_variance.sqrt().unsqueeze(-1).expand_as(f_mean)
        noise = torch.randn(
            f_mean.shape, generator=generator, device=f_mean.device, dtype=f_mean.dtype
        )
        return f_mean + f_scale * noise, f_scale

    def mean_field(self, data: VariationalData, f: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and scale of q(z | f), each `[*lead, D]`."""
        if data.scale is not None:
            return f, data.scale
        mean, raw_scale = f.chunk(2, dim=-1)
        return mean, positive_scale(raw_scale, self.min_scale)

    def sample(
        self, data: VariationalData, n_samples: int, generator: torch.Generator | None = None
    ) -> SiteSample:
        """Draw z `[S, B, D]` with log q~ `[S, B]` for the configured objective."""
        batch = data.context.shape[:-1]
        if len(batch) == 2 and batch[0] != n_samples:
            raise ValueError(f"a per-sample context needs S = {n_samples}, got {batch[0]}")
        lead = (n_samples, batch[-1])
        context = data.context

        def normal(*shape: int) -> Tensor:
            return torch.randn(
                shape, generator=generator, device=context.device, dtype=context.dtype
            )

        xi = normal(*lead, self.latent_input_dim)  # [S, B, c]
        log_q_xi = standard_normal_log_prob(xi)
        f_mean, f_variance = self.gp_moments(data, xi)  # [S, B, d_f], [S, B]
        terms: dict[str, Tensor] = {"log_q_xi": log_q_xi}
        if self.objective == "collapsed":
            assert data.scale is not None
            total_scale = (f_variance.unsqueeze(-1) + data.scale.pow(2)).sqrt()  # [S, B, D]
            z = f_mean + total_scale * normal(*lead, self.z_dim)
            log_q_z = normal_log_prob(z, f_mean, total_scale)  # log q(z | xi)
            r_xi = self.auxiliary.xi_given_z(context, z)
            log_r_xi = normal_log_prob(xi, *r_xi)
            log_q = log_q_z + log_q_xi - log_r_xi
        else:
            f, f_scale = self.sample_f(f_mean, f_variance, generator)  # [S, B, d_f]
            log_q_f = normal_log_prob(f, f_mean, f_scale)
            z_mean, z_scale = self.mean_field(data, f)
            z = z_mean + z_scale * normal(*lead, self.z_dim)
            log_q_z = normal_log_prob(z, z_mean, z_scale)  # log q(z | f)
            if self.objective == "hierarchical":
                r_xi = self.auxiliary.xi_given_z(context, z)
                log_r_xi = normal_log_prob(xi, *r_xi)
                log_r_f = normal_log_prob(f, *self.auxiliary.f_given_xi_z(context, z, xi))
                log_q = log_q_z + log_q_f + log_q_xi - log_r_xi - log_r_f
                terms |= {"log_q_f": log_q_f, "log_r_f": log_r_f}
            else:
                r_xi, r_f = self.auxiliary.xi_and_f_given_z(context, z)
                log_r_xi = normal_log_prob(xi, *r_xi)
                kl_f = normal_kl(f_mean, f_scale, *r_f)  # KL(q(f | xi) || r(f | x, z))
                log_q = log_q_z + kl_f + log_q_xi - log_r_xi
                terms |= {"kl_f": kl_f}
        terms |= {"log_q_z": log_q_z, "log_r_xi": log_r_xi}
        if self.aux_samples > 0:
            terms["log_q_single_sample"] = log_q
            log_q = self.importance_weighted_log_q(data, z, r_xi, log_q, generator)
        extras = {
            "jitter": data.cholesky.jitter.detach().max(),
            "cholesky_retries": data.cholesky.retries.max().to(context.dtype),
            "kernel_variance": self.kernel.variance.detach(),
            "kernel_inverse_lengthscale_mean": self.kernel.inverse_lengthscales.detach().mean(),
            "conditional_variance_mean": f_variance.detach().mean(),
        }
        self.last_extras = extras  # the trainer logs the latest diagnostics from here
        return SiteSample(z=z, log_q=log_q, terms=terms, extras=extras)

    def importance_weighted_log_q(
        self,
        data: VariationalData,
        z: Tensor,
        r_xi: tuple[Tensor, Tensor],
        log_ratio_drawn: Tensor,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """log (1/(K+1)) sum_k q(z, psi_k) / r(psi_k | x, z), psi_1..K ~ r, `[S, B]`.

        `log_ratio_drawn` is the k = 0 term, for the psi that made z (Sobolev & Vetrov 2019).
        """
        count = self.aux_samples
        r_xi_mean, r_xi_scale = r_xi  # [S, B, c]
        noise = torch.randn(
            (count, *r_xi_mean.shape), generator=generator, device=z.device, dtype=z.dtype
        )
        xi = r_xi_mean + r_xi_scale * noise  # [K, S, B, c]
        log_ratio = standard_normal_log_prob(xi) - normal_log_prob(xi, r_xi_mean, r_xi_scale)
        f_mean, f_variance = self.gp_moments(data, xi)  # [K, S, B, d_f], [K, S, B]
        if self.objective == "collapsed":
            assert data.scale is not None
            total_scale = (f_variance.unsqueeze(-1) + data.scale.pow(2)).sqrt()
            log_ratio = log_ratio + normal_log_prob(z, f_mean, total_scale)
        else:
            r_f_mean, r_f_scale = self.auxiliary.f_given_xi_z(data.context, z, xi)
            f_noise = torch.randn(
                r_f_mean.shape, generator=generator, device=z.device, dtype=z.dtype
            )
            f = r_f_mean + r_f_scale * f_noise  # [K, S, B, d_f]
            f_scale = f_variance.sqrt().unsqueeze(-1).expand_as(f)
            z_mean, z_scale = self.mean_field(data, f)
            log_ratio = (
                log_ratio
                + normal_log_prob(z, z_mean, z_scale)
                + normal_log_prob(f, f_mean, f_scale)
                - normal_log_prob(f, r_f_mean, r_f_scale)
            )
        all_ratios = torch.cat([log_ratio_drawn.unsqueeze(0), log_ratio], dim=0)  # [K+1, S, B]
        return torch.logsumexp(all_ratios, dim=0) - math.log(count + 1)


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
