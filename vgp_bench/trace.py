"""The one object a model hands back: per-sample log densities of a forward pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class Trace:
    """log p(x, z) and the variational surrogate log q~(z) for S samples of B data points.

    `log_p - log_q` is a single-sample lower bound on log p(x) and its exponent an importance
    weight. `terms` holds named pieces (reconstruction, prior, auxiliary terms), each [S, B],
    and `extras` the heads' diagnostics of this pass (kernel, jitter), for logging only.
    """

    log_p: Tensor  # [S, B]
    log_q: Tensor  # [S, B]
    terms: dict[str, Tensor] = field(default_factory=dict)
    extras: dict[str, Tensor] = field(default_factory=dict)  # `<site>/<name>` -> scalar

    @property
    def log_weights(self) -> Tensor:
        """log w = log p(x, z) - log q~(z), [S, B]."""
        return self.log_p - self.log_q
