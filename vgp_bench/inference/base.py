"""The interface between models and variational families: sites, heads and their samples."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

LogJoint = Callable[[Tensor], Tensor]  # z [S, B, D] -> log p(x, z) [S, B], differentiable in z


@dataclass(frozen=True)
class SiteSpec:
    """A stochastic site of a model: the size of the context it offers and of its latent z.

    `offers_log_joint`: the model passes the head `log_joint(z)`, log p(x, z) as a function of
    this site's z with everything else fixed (possible when the site holds all of the model's
    latents, as the DLGM's joint site; not for DRAW's sequential steps). Heads that move z
    along grad_z log p(x, z) (inference=hvi) need it and refuse sites without it.
    """

    context_dim: int
    z_dim: int
    offers_log_joint: bool = False


@dataclass
class SiteSample:
    """What a head returns for one site: reparameterized z and its surrogate log-density."""

    z: Tensor  # [S, B, D]
    log_q: Tensor  # [S, B]  log q~(z), the estimate of log q(z) the objective uses
    terms: dict[str, Tensor] = field(default_factory=dict)  # each [S, B], for logging
    extras: dict[str, Tensor] = field(default_factory=dict)  # diagnostics (not per-sample)

    def site_extras(self, site: str) -> dict[str, Tensor]:
        """The diagnostics as a Trace holds them: `<site>/<name>` -> scalar."""
        return {f"{site}/{name}": value for name, value in self.extras.items()}


class VariationalHead(nn.Module, ABC):
    """A variational family for one site: draws z given the site's context.

    `context` is either `[B, C]` (shared by all samples, so per-example work is done once)
    or `[S, B, C]` (one context per sample, as in DRAW where it depends on earlier draws).
    All randomness comes from `generator`. `log_joint` is given at sites whose spec
    `offers_log_joint` (None elsewhere); heads that do not need it ignore it.
    """

    def __init__(self, spec: SiteSpec) -> None:
        super().__init__()
        self.spec = spec

    @abstractmethod
    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,
    ) -> SiteSample: ...

    # optional capabilities, each with its default; a family that has one overrides it
    has_diagnostics: bool = False  # `diagnostics` summarizes how the family uses its freedom
    has_auxiliary_samples: bool = False  # `auxiliary_samples(K)` sets the r samples of log q~
    # whether a pass returns its diagnostics in `SiteSample.extras` (`extras_reported` turns
    # them off for training steps that log nothing: they change no number of the step)
    reports_extras: bool = True

    @property
    def evaluation_weight(self) -> str | None:
        """Which importance weight evaluation uses, when the family has a choice (metrics.json)."""
        return None

    def diagnostics(
        self, context: Tensor, n_draws: int, generator: torch.Generator | None = None
    ) -> dict[str, float]:
        """`{statistic: value}` of the family on a context `[B, C]` (none by default)."""
        return {}

    @contextmanager
    def auxiliary_samples(self, count: int) -> Iterator[None]:
        """Within the block, log q~ uses `count` auxiliary importance samples (families with an
        auxiliary model r; the others have none to set)."""
        raise NotImplementedError(f"{type(self).__name__} has no auxiliary samples")
        yield  # pragma: no cover

    def sampler(self, context: Tensor) -> SiteSampler:
        """Draws for one `[B, C]` context, chunk after chunk: `sampler(S, generator, log_joint)`
        gives what `self(context, S, generator, log_joint)` gives. A head whose per-example work
        does not depend on the samples does it once here (evaluation draws thousands)."""

        def draw(
            n_samples: int,
            generator: torch.Generator | None = None,
            log_joint: LogJoint | None = None,
        ) -> SiteSample:
            return self(context, n_samples, generator, log_joint)

        return draw


@contextmanager
def extras_reported(heads: Mapping[str, VariationalHead], report: bool) -> Iterator[None]:
    """Within the block, the heads return their diagnostics (`SiteSample.extras`) only if
    `report`; each head's setting is restored after."""
    if report:  # the default of every head: nothing to set
        yield
        return
    saved = {name: head.reports_extras for name, head in heads.items()}
    for head in heads.values():
        head.reports_extras = False
    try:
        yield
    finally:
        for name, head in heads.items():
            head.reports_extras = saved[name]


SiteSampler = Callable[[int, "torch.Generator | None", "LogJoint | None"], SiteSample]

HeadFactory = Callable[[SiteSpec], VariationalHead]


def build_heads(factory: HeadFactory, sites: Mapping[str, SiteSpec]) -> nn.ModuleDict:
    """One head per model site, built by the (partially instantiated) inference config."""
    return nn.ModuleDict({name: factory(spec) for name, spec in sites.items()})
