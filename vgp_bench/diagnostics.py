"""Head diagnostics on real contexts: how much a variational family uses its flexibility.

The model builds each site's context inside its forward pass, so the heads are wrapped in
recorders that keep the first context every site receives and then sample as usual; each head
that defines `diagnostics(context, n_draws, generator)` then summarizes its own family there
(for the VGP: the warp statistics of docs/design.md, section 5.2). Works for every model, none of
whose code knows about it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from vgp_bench.data.base import ImageSplit
from vgp_bench.inference.base import LogJoint, SiteSample, VariationalHead
from vgp_bench.models.base import LatentVariableModel


@contextmanager
def evaluation_mode(*modules: nn.Module) -> Iterator[None]:
    """Puts `modules` in evaluation mode for the block, then gives each its own mode back."""
    modes = [module.training for module in modules]
    for module in modules:
        module.eval()
    try:
        yield
    finally:
        for module, mode in zip(modules, modes, strict=True):
            module.train(mode)


class RecordingHead(nn.Module):
    """Delegates to `head`, handing each call's context and draw to `record`: statistics on the
    contexts and draws a model makes, which no model's code knows about."""

    def __init__(self, head: VariationalHead, record: Callable[[Tensor, SiteSample], None]) -> None:
        super().__init__()
        self.head = head
        self.record = record

    def forward(
        self,
        context: Tensor,
        n_samples: int,
        generator: torch.Generator | None = None,
        log_joint: LogJoint | None = None,
    ) -> SiteSample:
        sample = self.head(context, n_samples, generator, log_joint=log_joint)
        self.record(context, sample)
        return sample


@torch.no_grad()
def head_diagnostics(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    x: Tensor,
    generator: torch.Generator,
    n_draws: int = 256,
) -> dict[str, float]:
    """`{site/statistic: value}` for every head with diagnostics, on the contexts of `x`."""
    if not any(head.has_diagnostics for head in heads.values()):
        return {}
    contexts: dict[str, Tensor] = {}  # the first context each site receives

    def first_context(name: str) -> Callable[[Tensor, SiteSample], None]:
        return lambda context, _: contexts.setdefault(name, context.detach())

    recorders = nn.ModuleDict(
        {name: RecordingHead(head, first_context(name)) for name, head in heads.items()}
    )
    results: dict[str, float] = {}
    with evaluation_mode(model, heads):
        model(x, recorders, 1, generator)
        for name, context in contexts.items():
            head = heads[name]
            if not head.has_diagnostics:
                continue
            for statistic, value in head.diagnostics(context, n_draws, generator).items():
                results[f"{name}/{statistic}"] = value
    return results


@torch.no_grad()
def auxiliary_gap(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    split: ImageSplit,
    aux_samples: int,
    draws: int,
    generator: torch.Generator,
    device: torch.device,
    batch_size: int = 20,
    progress: bool = False,
) -> dict[str, Any]:
    """How much of the bound's looseness is r's: the bound at K = 0 against K = `aux_samples`.

    For heads with importance-weighted auxiliary samples (the VGP), the bound with K = 0 and
    with K auxiliary samples per z (Sobolev & Vetrov 2019), each averaged over `draws` z per
    example; their difference is what a better r could still gain (docs/design.md, section 5.1).
    Empty for families without an auxiliary model.
    """
    weighted = [head for head in heads.values() if head.has_auxiliary_samples]
    if not weighted or aux_samples < 1 or len(split) == 0:
        return {}
    bounds: dict[int, list[Tensor]] = {0: [], aux_samples: []}
    bar = tqdm(
        total=len(split),
        desc=f"aux gap K={aux_samples}",
        unit="example",
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
    )
    with bar, evaluation_mode(model, heads):
        for x in split.batches(batch_size, generator=generator):
            x = x.to(device)
            for count in bounds:
                with ExitStack() as stack:
                    for head in weighted:
                        stack.enter_context(head.auxiliary_samples(count))
                    log_weights = model(x, heads, draws, generator).log_weights  # [draws, B]
                bounds[count].append(log_weights.double().mean(0).cpu())
            bar.update(x.shape[0])
    at_zero, at_k = torch.cat(bounds[0]), torch.cat(bounds[aux_samples])
    difference = at_k - at_zero
    return {
        "aux_gap": float(difference.mean()),
        "aux_gap_stderr": float(difference.std() / max(difference.numel(), 2) ** 0.5),
        "aux_gap_bound_k0_nll": float(-at_zero.mean()),
        "aux_gap_bound_nll": float(-at_k.mean()),
        "aux_gap_samples": aux_samples,
        "aux_gap_draws": draws,
        "aux_gap_examples": int(at_zero.numel()),
    }
