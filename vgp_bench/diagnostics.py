"""Head diagnostics on real contexts: how much a variational family uses its flexibility.

The model builds each site's context inside its forward pass, so the heads are wrapped in
recorders that keep the first context every site receives and then sample as usual; each head
that defines `diagnostics(context, n_draws, generator)` then summarizes its own family there
(for the VGP: the warp statistics of DESIGN.md section 2). Works for every model, none of
whose code knows about it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from vgp_bench.inference.base import SiteSample
from vgp_bench.models.base import LatentVariableModel


class _RecordingHead(nn.Module):
    """Delegates to `head`, keeping the first context it is called with."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head
        self.context: Tensor | None = None

    def forward(self, context: Tensor, n_samples: int, generator: Any = None) -> SiteSample:
        if self.context is None:
            self.context = context.detach()
        return self.head(context, n_samples, generator)


@torch.no_grad()
def head_diagnostics(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    x: Tensor,
    generator: torch.Generator,
    n_draws: int = 256,
) -> dict[str, float]:
    """`{site/statistic: value}` for every head with diagnostics, on the contexts of `x`."""
    if not any(hasattr(head, "diagnostics") for head in heads.values()):
        return {}
    was_training = model.training, heads.training
    model.eval()
    heads.eval()
    recorders = nn.ModuleDict({name: _RecordingHead(head) for name, head in heads.items()})
    try:
        model(x, recorders, 1, generator)
        results: dict[str, float] = {}
        for name, recorder in recorders.items():
            head = recorder.head
            if recorder.context is None or not hasattr(head, "diagnostics"):
                continue
            for statistic, value in head.diagnostics(recorder.context, n_draws, generator).items():
                results[f"{name}/{statistic}"] = value
        return results
    finally:
        model.train(was_training[0])
        heads.train(was_training[1])
