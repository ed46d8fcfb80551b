"""The VGP's variational data for one forward call: what q needs, computed once per call."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from vgp_bench.gp.cholesky import JitteredCholesky
from vgp_bench.gp.conditional import (
    DenseOutputs,
    InverseRoute,
    VariationalOutputs,
    inverse_route,
    uses_inverse_route,
)


@dataclass
class VariationalData:
    """What q needs for one forward call: computed once per example for a `[B, C]` context,
    once per sample and example for `[S, B, C]` (the batch shape below)."""

    context: Tensor  # [*batch, C], batch = (B,) or (S, B)
    inputs: Tensor  # S: [M, c] global, [*batch, M, c] amortized
    cholesky: JitteredCholesky  # of K_ss + jitter I: factor [M, M] or [*batch, M, M]
    outputs: VariationalOutputs  # T: [*batch, M, d_f] (residuals around the prior mean)
    scale: Tensor | None  # mean-field sigma [*batch, D]; None when the GP outputs it
    location: Tensor | None = None  # identity prior mean: m(h) [*batch, D]
    warp_scale: Tensor | None = None  # identity prior mean: s(h) [*batch, D]
    affine: Tensor | None = None  # warp=linear, zero prior mean: P [c + 1, M] or [*batch, c + 1, M]
    inverse_route: InverseRoute | None = None  # L^{-1}, L^{-1} T: kept by the first no-grad call

    def route_for(self, query: Tensor) -> InverseRoute | None:
        """L^{-1} and L^{-1} T when the GP conditional at `query` takes the inverse route (an
        evaluation's chunks of samples, no gradient): formed by the first such call, kept for
        every later one on this data; None otherwise."""
        if not isinstance(self.outputs, DenseOutputs):
            return None
        if not uses_inverse_route(self.inputs, self.outputs, query):
            return None
        if self.inverse_route is None:
            self.inverse_route = inverse_route(self.cholesky.factor, self.outputs)
        return self.inverse_route
