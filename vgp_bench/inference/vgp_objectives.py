"""The VGP's objectives (inference.objective, docs/design.md, section 3) as strategies of the head.

Given latent inputs xi ~ N(0, I), each draws z from the family and gives the log-ratio of the
draw, log q(z, psi) - log r(psi | x, z) with psi the latent variables that made z (xi, or xi and
f): the head's log q~ with K = 0 auxiliary samples. `psi_log_ratios` gives the same ratio at
psi_1..K drawn from r, the terms of the importance-weighted estimate (Sobolev & Vetrov 2019)

    log q~ = log (1/(K+1)) sum_k q(z, psi_k) / r(psi_k | x, z),   psi_0 the draw that made z.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from vgp_bench.distributions import normal_kl, normal_log_prob, standard_normal_log_prob
from vgp_bench.inference.auxiliary import AuxiliaryModel
from vgp_bench.inference.vgp_data import VariationalData

Gaussian = tuple[Tensor, Tensor]  # mean and scale, each [..., dim]


class VGPFamily(Protocol):
    """What the objectives use of the head (vgp.VGPHead): the family's conditionals and r."""

    z_dim: int
    auxiliary: AuxiliaryModel

    def f_moments(self, data: VariationalData, xi: Tensor) -> Gaussian: ...

    def z_moments(self, data: VariationalData, xi: Tensor) -> Gaussian: ...

    def sample_f(
        self, f_mean: Tensor, f_scale: Tensor, generator: torch.Generator | None = None
    ) -> Tensor: ...

    def mean_field(self, data: VariationalData, f: Tensor) -> Gaussian: ...

    def r_xi(self, data: VariationalData, z: Tensor) -> Gaussian: ...


@dataclass
class Draw:
    """z and the log-ratio of the latent variables that made it."""

    z: Tensor  # [S, B, D]
    log_ratio: Tensor  # [S, B]  log q(z, psi) - log r(psi | x, z)
    r_xi: Gaussian  # r(xi | x, z), [S, B, c] each: where psi_1..K are drawn
    terms: dict[str, Tensor]  # each [S, B], for logging


class Objective(ABC):
    """An objective of the VGP: how z is drawn given xi, and its log-ratios."""

    name: str  # inference.objective

    @abstractmethod
    def draw(
        self,
        head: VGPFamily,
        data: VariationalData,
        xi: Tensor,
        generator: torch.Generator | None,
    ) -> Draw:
        """z `[S, B, D]` drawn given xi `[S, B, c]`, with the log-ratio of (xi, ...)."""

    @abstractmethod
    def psi_log_ratios(
        self,
        head: VGPFamily,
        data: VariationalData,
        z: Tensor,
        xi: Tensor,
        r_xi: Gaussian,
        generator: torch.Generator | None,
    ) -> Tensor:
        """log q(z, psi_k) - log r(psi_k | x, z) `[K, S, B]` at xi_k `[K, S, B, c]` ~ r(xi | .)."""

    def for_evaluation(self) -> Objective:
        """The objective whose importance weight evaluation uses (E[w] = p(x))."""
        return self

    @abstractmethod
    def auxiliary_structure(self, paper_auxiliary: str) -> str:
        """Which factorization of r the objective needs (see AuxiliaryModel)."""

    def evaluation_weight(self, aux_samples: int) -> str:
        """Which importance weight evaluation uses with K = `aux_samples` (metrics.json)."""
        return f"{self.name}, K = {aux_samples}; E[w] = p(x)"


class Collapsed(Objective):
    """f integrated out, z Gaussian given xi: q(z | xi) = N(mu(xi), diag(s2(xi) + sigma^2)),

    log q~ = log q(z | xi) + log q(xi) - log r(xi | x, z).
    """

    name = "collapsed"

    def draw(
        self,
        head: VGPFamily,
        data: VariationalData,
        xi: Tensor,
        generator: torch.Generator | None,
    ) -> Draw:
        z_mean, z_scale = head.z_moments(data, xi)  # [S, B, D] each
        noise = standard_normal((*xi.shape[:-1], head.z_dim), data.context, generator)
        z = z_mean + z_scale * noise
        log_q_z = normal_log_prob(z, z_mean, z_scale)  # log q(z | xi)
        r_xi = head.r_xi(data, z)
        log_q_xi, log_r_xi = standard_normal_log_prob(xi), normal_log_prob(xi, *r_xi)
        log_ratio = log_q_z + log_q_xi - log_r_xi
        terms = {"log_q_xi": log_q_xi, "log_q_z": log_q_z, "log_r_xi": log_r_xi}
        return Draw(z, log_ratio, r_xi, terms)

    def psi_log_ratios(
        self,
        head: VGPFamily,
        data: VariationalData,
        z: Tensor,
        xi: Tensor,
        r_xi: Gaussian,
        generator: torch.Generator | None,
    ) -> Tensor:
        return xi_log_ratio(xi, r_xi) + normal_log_prob(z, *head.z_moments(data, xi))

    def auxiliary_structure(self, paper_auxiliary: str) -> str:
        return "xi"


class Hierarchical(Objective):
    """f kept explicit, every term at the sampled values:

    log q~ = log q(z | f) + log q(f | xi) + log q(xi) - log r(xi | x, z) - log r(f | xi, x, z).
    """

    name = "hierarchical"

    def draw(
        self,
        head: VGPFamily,
        data: VariationalData,
        xi: Tensor,
        generator: torch.Generator | None,
    ) -> Draw:
        step = draw_through_f(head, data, xi, generator)
        log_q_f = normal_log_prob(step.f, *step.q_f)
        log_r_f = normal_log_prob(step.f, *head.auxiliary.f_given_xi_z(data.context, step.z, xi))
        log_ratio = step.log_q_z + log_q_f + step.log_q_xi - step.log_r_xi - log_r_f
        terms = {"log_q_xi": step.log_q_xi, "log_q_f": log_q_f, "log_r_f": log_r_f}
        return Draw(step.z, log_ratio, step.r_xi, terms | step.terms)

    def psi_log_ratios(
        self,
        head: VGPFamily,
        data: VariationalData,
        z: Tensor,
        xi: Tensor,
        r_xi: Gaussian,
        generator: torch.Generator | None,
    ) -> Tensor:
        q_f = head.f_moments(data, xi)  # [K, S, B, d_f] each
        r_f = head.auxiliary.f_given_xi_z(data.context, z, xi)
        f = head.sample_f(*r_f, generator)  # [K, S, B, d_f]
        return (
            xi_log_ratio(xi, r_xi)
            + normal_log_prob(z, *head.mean_field(data, f))
            + normal_log_prob(f, *q_f)
            - normal_log_prob(f, *r_f)
        )

    def auxiliary_structure(self, paper_auxiliary: str) -> str:
        return "xi_then_f"

    def evaluation_weight(self, aux_samples: int) -> str:
        if aux_samples == 0:
            return "hierarchical, K = 0 (weights may have infinite variance; use aux_samples > 0)"
        return super().evaluation_weight(aux_samples)


class Paper(Objective):
    """Eq. 7 as printed, with the analytic KL(q(f | xi) || r(f | .)), r(f | x, z) or
    r(f | xi, x, z) (inference.paper_auxiliary):

    log q~ = log q(z | f) + KL(q(f | xi) || r(f | .)) + log q(xi) - log r(xi | x, z).

    A valid bound, looser than the collapsed one; its weight has E[w] < p(x), so a
    paper-trained head is evaluated with the collapsed weight (the family is the same).
    """

    name = "paper"

    def draw(
        self,
        head: VGPFamily,
        data: VariationalData,
        xi: Tensor,
        generator: torch.Generator | None,
    ) -> Draw:
        step = draw_through_f(head, data, xi, generator)
        r_f = head.auxiliary.f_given_xi_z(data.context, step.z, xi)
        kl_f = normal_kl(*step.q_f, *r_f)
        log_ratio = step.log_q_z + kl_f + step.log_q_xi - step.log_r_xi
        terms = {"log_q_xi": step.log_q_xi, "kl_f": kl_f}
        return Draw(step.z, log_ratio, step.r_xi, terms | step.terms)

    def psi_log_ratios(
        self,
        head: VGPFamily,
        data: VariationalData,
        z: Tensor,
        xi: Tensor,
        r_xi: Gaussian,
        generator: torch.Generator | None,
    ) -> Tensor:
        # the family is the collapsed one (K > 0 is refused in training: only evaluation and
        # the auxiliary-gap diagnostic get here)
        return COLLAPSED.psi_log_ratios(head, data, z, xi, r_xi, generator)

    def for_evaluation(self) -> Objective:
        return COLLAPSED

    def auxiliary_structure(self, paper_auxiliary: str) -> str:
        return PAPER_AUXILIARIES[paper_auxiliary]

    def evaluation_weight(self, aux_samples: int) -> str:
        return "collapsed (paper-trained head, its own r(xi | x, z)); E[w] = p(x)"


# inference.paper_auxiliary: the r of the paper objective, as an AuxiliaryModel structure
PAPER_AUXILIARIES = {
    "factorized": "factorized",  # r(xi | x, z) r(f | x, z) (Section 3.2)
    "conditional": "xi_then_f",  # r(xi | x, z) r(f | xi, x, z) (Eq. 6)
}
COLLAPSED = Collapsed()
OBJECTIVES: dict[str, Objective] = {
    "collapsed": COLLAPSED,
    "hierarchical": Hierarchical(),
    "paper": Paper(),
}


@dataclass
class ThroughF:
    """A draw of f given xi, then of z given f, with its terms."""

    q_f: Gaussian  # q(f | xi), [S, B, d_f] each
    f: Tensor  # [S, B, d_f]
    z: Tensor  # [S, B, D]
    log_q_xi: Tensor  # [S, B]
    log_q_z: Tensor  # log q(z | f) [S, B]
    r_xi: Gaussian
    log_r_xi: Tensor  # [S, B]

    @property
    def terms(self) -> dict[str, Tensor]:
        return {"log_q_z": self.log_q_z, "log_r_xi": self.log_r_xi}


def draw_through_f(
    head: VGPFamily, data: VariationalData, xi: Tensor, generator: torch.Generator | None
) -> ThroughF:
    """f ~ q(f | xi), then z ~ q(z | f) (the noise of f first, then that of z)."""
    q_f = head.f_moments(data, xi)  # [S, B, d_f] each
    f = head.sample_f(*q_f, generator)
    z_mean, z_scale = head.mean_field(data, f)
    z = z_mean + z_scale * standard_normal((*xi.shape[:-1], head.z_dim), data.context, generator)
    log_q_z = normal_log_prob(z, z_mean, z_scale)  # log q(z | f)
    r_xi = head.r_xi(data, z)
    log_q_xi, log_r_xi = standard_normal_log_prob(xi), normal_log_prob(xi, *r_xi)
    return ThroughF(q_f, f, z, log_q_xi, log_q_z, r_xi, log_r_xi)


def xi_log_ratio(xi: Tensor, r_xi: Gaussian) -> Tensor:
    """log q(xi) - log r(xi | x, z), `[..., S, B]`."""
    return standard_normal_log_prob(xi) - normal_log_prob(xi, *r_xi)


def standard_normal(
    shape: tuple[int, ...], like: Tensor, generator: torch.Generator | None
) -> Tensor:
    """N(0, I) noise of `shape` on the device and in the precision of `like`."""
    return torch.randn(shape, generator=generator, device=like.device, dtype=like.dtype)
