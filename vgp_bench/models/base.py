"""What every generative model p(x, z) offers the trainer, independent of inference."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor, nn

from vgp_bench.inference.base import SiteSpec
from vgp_bench.trace import Trace


class LatentVariableModel(nn.Module, ABC):
    """A model p(x, z) with named stochastic sites whose q is supplied from outside.

    At each site the model builds a context, asks `heads[site]` for `z` and `log q~`, and adds
    `log p(z_site | parents)` itself. Images are `[B, C, H, W]` with values in {0, 1}.
    """

    sites: dict[str, SiteSpec]
    # Whether a pass refuses x outside {0, 1} (`check_binary`: a read of the batch on the host,
    # and a graph break under torch.compile). The runner turns it off: its batches come from
    # ImageSplits, binary by construction (fixed splits checked at load, dynamic ones drawn).
    checks_inputs: bool = True

    def __init__(self, x_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.x_shape = tuple(int(v) for v in x_shape)

    @abstractmethod
    def forward(
        self,
        x: Tensor,
        heads: nn.ModuleDict,
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> Trace:
        """S samples of (log p(x, z), log q~(z)) for a batch x `[B, C, H, W]`, each `[S, B]`."""

    @abstractmethod
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """Bernoulli means of `n` draws from the prior predictive, `[n, C, H, W]`."""

    @abstractmethod
    def reconstruct(
        self, x: Tensor, heads: nn.ModuleDict, generator: torch.Generator | None = None
    ) -> Tensor:
        """Bernoulli means of p(x | z) for one z ~ q(z | x), `[B, C, H, W]`."""

    def log_weight_sampler(
        self, x: Tensor, heads: nn.ModuleDict
    ) -> Callable[[int, torch.Generator | None], Tensor]:
        """`sample(S, generator)` -> log w `[S, B]` for the batch x, chunk after chunk, as
        `self(x, heads, S, generator).log_weights` gives them; a model whose per-example work
        does not depend on the samples does it once (the default redoes it every chunk)."""
        return lambda n_samples, generator=None: self(x, heads, n_samples, generator).log_weights

    def start_from_data(self, pixel_means: Tensor) -> None:
        """Set data-dependent starting values from the training split's mean image `[C, H, W]`
        (in [0, 1]); the default model has none."""

    def latent_groups(self, site: str) -> dict[str, int]:
        """Named consecutive slices of one draw of `site`'s z, `{name: size}`, for statistics."""
        return {site: self.sites[site].z_dim}

    def extra_figures(self, n: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """Model-specific image grids to save beside samples.png: name -> `[N, C, H, W]`."""
        return {}
