"""Black-box variational inference for an unnormalized density: fit one head to log p~(z).

The target has no data, so the head sees a constant one-element context (B = 1): its
per-example networks reduce to free parameters (for the VGP, "the variational data are free
parameters here"). Each step draws S reparameterized samples and ascends the Monte Carlo bound
E_q[log p~(z) - log q~(z)] <= log Z with Adam under a cosine step-size decay, skipping steps
as training does (`vgp_bench.run.loop.nonfinite`). The heads are the training runs' families: every
`configs/inference/<family>.yaml` is one, with the black-box options of `configs/fit.yaml`'s
`head.<family>` on top; the site offers log p~(z) to the head (`SiteSpec.offers_log_joint`), as
HVI needs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from torch import Tensor
from tqdm import tqdm

from vgp_bench.catalog import FIT_ALIASES, fit_families
from vgp_bench.errors import ConfigError
from vgp_bench.estimators import chunked_estimate
from vgp_bench.inference.base import SiteSample, SiteSpec, VariationalHead
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.locations import CONFIG_DIR
from vgp_bench.run.config.store import compose_config
from vgp_bench.run.loop.nonfinite import NonFinitePolicy, SkippedSteps, gradient_norm
from vgp_bench.run.process.runtime import build

LogDensity = Callable[[Tensor], Tensor]  # [n, D] -> [n]

INFERENCE_CONFIGS = Path(CONFIG_DIR) / "inference"
ALIASES = FIT_ALIASES  # vgp-fit's name for the VAE's mean-field family
families = fit_families  # every family there is (catalog.fit_families)


def black_box_options(family: str) -> dict[str, Any]:
    """The options `configs/fit.yaml` sets for `family` (`head.<family>`, with what its defaults
    list includes there: the VGP's paper form) over its inference config: sizes and starts
    measured on the 2-D targets."""
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app (vgp-fit): its search path
        fit_config = compose(config_name="fit")
    else:
        fit_config = compose_config([], config_name="fit")
    options = fit_config.head.get(family)
    return {} if options is None else dict(OmegaConf.to_container(options))


def build_head(family: str, dim: int, **options: Any) -> VariationalHead:
    """The head of `family` for a single site with a one-element context and z of size `dim`,
    from `configs/inference/<family>.yaml`, `black_box_options` and `options`."""
    path = INFERENCE_CONFIGS / f"{ALIASES.get(family, family)}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown family {family!r}; choose one of {families()}")
    node = OmegaConf.merge(OmegaConf.load(path), black_box_options(family), options)
    return build(node, spec=SiteSpec(context_dim=1, z_dim=dim, offers_log_joint=True))


@dataclass
class FittedFamily:
    """A head fitted to an unnormalized density, with its training history.

    Sampling and estimates draw from `generator` (seeded by `fit`), so a sequence of calls is
    reproducible; pass another generator to any method to draw independently.
    """

    family: str
    head: VariationalHead
    log_density: LogDensity
    dim: int
    generator: torch.Generator
    history: list[float] = field(default_factory=list)  # the minibatch bound at each step
    skipped_steps: int = 0  # steps whose bound or gradient was not finite
    seconds: float = 0.0  # wall-clock time of the optimization

    def _context(self) -> Tensor:
        parameter = next(self.head.parameters())
        return torch.ones(1, 1, dtype=parameter.dtype, device=parameter.device)  # [B=1, C=1]

    def _log_joint(self, z: Tensor) -> Tensor:
        """The site's log p~(z) for z `[S, B, D]`, `[S, B]`."""
        return self.log_density(z.reshape(-1, self.dim)).reshape(z.shape[:-1])

    def draw(self, n: int, generator: torch.Generator | None = None) -> SiteSample:
        """The head's site sample for n draws (with gradients when they are enabled)."""
        return self.head(self._context(), n, generator or self.generator, self._log_joint)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """n draws z ~ q, `[n, D]`."""
        return self.draw(n, generator).z[:, 0, :]

    @torch.no_grad()
    def log_weights(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """log w = log p~(z) - log q~(z) for n draws z ~ q, `[n]`."""
        site = self.draw(n, generator)
        return self.log_density(site.z[:, 0, :]) - site.log_q[:, 0]

    def elbo(
        self, n: int = 10_000, chunk_size: int = 10_000, generator: torch.Generator | None = None
    ) -> float:
        """The Monte Carlo bound E_q[log p~(z) - log q~(z)] <= log Z from n draws."""
        return float(self._estimate(n, chunk_size, generator).bound[0])

    def log_marginal(
        self, n: int = 1000, chunk_size: int = 10_000, generator: torch.Generator | None = None
    ) -> float:
        """The importance-weighted estimate log (1/n) sum_s w_s of log Z from n draws of q."""
        return self.log_marginal_with_reliability(n, chunk_size, generator)[0]

    def log_marginal_with_reliability(
        self, n: int = 1000, chunk_size: int = 10_000, generator: torch.Generator | None = None
    ) -> tuple[float, float]:
        """The IS estimate of log Z and the PSIS k-hat of its weights (> 0.7: do not trust it)."""
        estimate = self._estimate(n, chunk_size, generator)
        assert estimate.pareto_k is not None
        return float(estimate.log_likelihood[0]), float(estimate.pareto_k[0])

    def _estimate(self, n: int, chunk_size: int, generator: torch.Generator | None):
        def draw(count: int) -> Tensor:
            return self.log_weights(count, generator).unsqueeze(1)  # [k, B=1]

        return chunked_estimate(draw, n, chunk_size)


def fit(
    log_density: LogDensity,
    dim: int,
    family: str = "vgp",
    steps: int = 2000,
    seed: int = 0,
    samples_per_step: int = 256,
    learning_rate: float = 0.02,
    final_learning_rate: float = 0.0005,
    identity_start: float | None = 0.3,
    max_nonfinite: int | None = None,
    progress: bool = False,
    **options: Any,
) -> FittedFamily:
    """Fit a variational family to exp(log_density) by maximizing the bound on log Z.

    `log_density` maps `[n, dim]` to `[n]` (an unnormalized log density, differentiable in z).
    `family` is one of `families()` (vgp, mean_field, planar_flow, hvi, ...); `options` go to
    the head's constructor over its config and `black_box_options` (for the VGP e.g.
    `variational_data_size`, `objective`, `aux_samples`; `flow_length`; `leapfrog_steps`).
    The step size decays from `learning_rate` to `final_learning_rate` on a cosine. With
    `identity_start` set, a VGP starts as the identity warp z = xi + noise of that scale
    (`VGPHead.start_as_identity_warp`); None keeps the head's own initialization. All
    randomness (initialization, samples) comes from `seed`. A step whose bound or gradient is
    not finite makes no update; `max_nonfinite` of them in a row stop the fit (None: never).
    `progress` shows a bar of the steps on stderr.
    """
    if dim < 1 or steps < 0 or samples_per_step < 1:
        raise ConfigError(
            f"need dim >= 1, steps >= 0 and samples_per_step >= 1, got {dim}, {steps}, "
            f"{samples_per_step}"
        )
    with torch.random.fork_rng(devices=[]):  # parameter initialization from `seed` only
        torch.manual_seed(seed)
        head = build_head(family, dim, **options)
    if isinstance(head, VGPHead) and identity_start is not None:
        head.start_as_identity_warp(identity_start)
    fitted = FittedFamily(
        family=family,
        head=head,
        log_density=log_density,
        dim=dim,
        generator=torch.Generator().manual_seed(seed + 1),
    )
    _check_log_density(log_density, fitted.sample(2), dim)
    parameters = list(head.parameters())
    optimizer = torch.optim.Adam(parameters, lr=learning_rate)
    policy, skipped = NonFinitePolicy(max_nonfinite), SkippedSteps()
    training_generator = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    steps_bar = tqdm(
        range(steps), desc=f"fit {family}", unit="step", disable=not progress, leave=False
    )
    for step in steps_bar:
        for group in optimizer.param_groups:
            group["lr"] = cosine_step_size(step, steps, learning_rate, final_learning_rate)
        try:
            site = fitted.draw(samples_per_step, training_generator)
            bound = (log_density(site.z[:, 0, :]) - site.log_q[:, 0]).mean()  # over S draws
        except torch.linalg.LinAlgError:  # a Cholesky that failed at the largest jitter
            bound = torch.tensor(math.nan)
        optimizer.zero_grad(set_to_none=True)
        finite = bool(torch.isfinite(bound))
        if finite:
            (-bound).backward()
            finite = bool(torch.isfinite(gradient_norm(parameters)))
        if finite:
            optimizer.step()
        stop = policy.after_step(skipped, finite)
        fitted.skipped_steps = skipped.nonfinite_total
        if stop:
            raise policy.error(step, "; lower learning_rate")
        fitted.history.append(float(bound.detach()) if torch.isfinite(bound) else math.nan)
    fitted.seconds = time.perf_counter() - started
    head.eval()
    return fitted


def cosine_step_size(step: int, steps: int, initial: float, final: float) -> float:
    """Cosine decay from `initial` at step 0 to `final` at the last step."""
    progress = step / max(steps - 1, 1)
    return final + 0.5 * (initial - final) * (1.0 + math.cos(math.pi * progress))


def _check_log_density(log_density: LogDensity, z: Tensor, dim: int) -> None:
    values = log_density(z)
    if not isinstance(values, Tensor) or values.shape != (z.shape[0],):
        shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
        raise ConfigError(
            f"log_density must map z of shape [n, {dim}] to a tensor of shape [n]; "
            f"for [{z.shape[0]}, {dim}] it returned {shape}"
        )
