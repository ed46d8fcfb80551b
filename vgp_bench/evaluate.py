"""Importance-sampled test log-likelihood and bound; `vgp-eval checkpoint=... eval.is_samples=K`."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from tqdm import tqdm

from vgp_bench.checkpoint import atomic_file
from vgp_bench.data.base import ImageSplit
from vgp_bench.estimators import chunked_estimate
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run_folder import one_line_error
from vgp_bench.runtime import CONFIG_DIR

# An IS estimate may dip below the bound by Monte Carlo noise; flag it past this many nats.
BELOW_BOUND_TOLERANCE = 0.05


@dataclass
class SplitEstimate:
    """Per-example estimates over one split, `[N]` each."""

    log_likelihood: Tensor
    bound: Tensor
    is_samples: int
    pareto_k: Tensor | None = None  # PSIS k-hat of each example's weights (float64)

    def summary(self) -> dict[str, Any]:
        """Mean -log p(x) and -bound with standard errors, in nats."""
        count = self.log_likelihood.numel()
        nll = -self.log_likelihood.double()
        bound_nll = -self.bound.double()

        def stderr(v):
            return float(v.std() / math.sqrt(count)) if count > 1 else float("nan")

        is_below_bound = float(nll.mean()) > float(bound_nll.mean()) + BELOW_BOUND_TOLERANCE
        summary = {
            "nll": float(nll.mean()),
            "nll_stderr": stderr(nll),
            "bound_nll": float(bound_nll.mean()),
            "bound_nll_stderr": stderr(bound_nll),
            "bound_gap": float((bound_nll - nll).mean()),  # what a better q could gain
            "bound_gap_stderr": stderr(bound_nll - nll),
            "is_samples": self.is_samples,
            "n_examples": count,
            "is_below_bound": is_below_bound,
        }
        return summary | pareto_summary(self.pareto_k)


def pareto_summary(pareto_k: Tensor | None) -> dict[str, Any]:
    """Reliability of the IS estimates: PSIS k-hat over examples (Vehtari et al.).

    `pareto_k_above_0_7` is the share of examples whose weights have (nearly) infinite
    variance: their IS log-likelihood is not to be trusted at this S.
    """
    if pareto_k is None:
        return {}
    finite = pareto_k[torch.isfinite(pareto_k)]
    if finite.numel() == 0:
        return {"pareto_k_mean": None, "pareto_k_max": None, "pareto_k_above_0_7": 0.0}
    return {
        "pareto_k_mean": float(finite.mean()),
        "pareto_k_max": float(finite.max()),
        "pareto_k_above_0_7": float((pareto_k > 0.7).double().mean()),
    }


@torch.no_grad()
def estimate_split(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    split: ImageSplit,
    is_samples: int,
    chunk_size: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device,
    progress: bool = False,
    description: str = "evaluate",
) -> SplitEstimate:
    """IS log-likelihood (logsumexp(log w) - log K) and bound per example, K in chunks."""
    was_training = model.training
    model.eval()
    heads.eval()
    log_likelihoods, bounds, pareto_ks = [], [], []
    batches = split.batches(batch_size, generator=generator)
    bar = tqdm(
        batches,
        total=split.batch_count(batch_size),
        desc=description,
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
        unit="batch",
    )
    for x in bar:
        x = x.to(device, non_blocking=True)
        estimate = chunked_estimate(
            lambda count, x=x: model(x, heads, count, generator).log_weights,
            n_samples=is_samples,
            chunk_size=chunk_size,
        )
        log_likelihoods.append(estimate.log_likelihood.cpu())
        bounds.append(estimate.bound.cpu())
        assert estimate.pareto_k is not None
        pareto_ks.append(estimate.pareto_k.cpu())
    model.train(was_training)
    heads.train(was_training)
    return SplitEstimate(
        torch.cat(log_likelihoods), torch.cat(bounds), is_samples, torch.cat(pareto_ks)
    )


def save_per_example(estimate: SplitEstimate, path: str | Path) -> None:
    """Per-example IS log-likelihood and bound as HDF5 datasets (written atomically)."""
    with atomic_file(path) as temporary, h5py.File(temporary, "w") as handle:
        handle.create_dataset("log_likelihood", data=estimate.log_likelihood.numpy())
        handle.create_dataset("bound", data=estimate.bound.numpy())
        if estimate.pareto_k is not None:
            handle.create_dataset("pareto_k", data=estimate.pareto_k.numpy())
        handle.attrs["is_samples"] = estimate.is_samples


def format_summary(summary: dict[str, Any], label: str = "test") -> str:
    """A short human-readable table of one evaluation."""
    lines = [
        f"{'':<10} {'-log p(x) (IS)':>18} {'-bound':>18}   samples  examples",
        f"{label:<10} {summary['nll']:>10.2f} ± {summary['nll_stderr']:<5.2f} "
        f"{summary['bound_nll']:>10.2f} ± {summary['bound_nll_stderr']:<5.2f}"
        f"   {summary['is_samples']:>7}  {summary['n_examples']:>8}",
    ]
    for site, weight in (summary.get("weight") or {}).items():
        if "infinite variance" in weight:
            lines.append(f"WARNING: site {site}: {weight}")
    share = summary.get("pareto_k_above_0_7")
    if share:
        lines.append(
            f"WARNING: {100 * share:.1f}% of examples have PSIS k-hat > 0.7: their weights have "
            "nearly infinite variance; raise eval.is_samples or distrust those estimates"
        )
    if summary["is_below_bound"]:
        lines.append("WARNING: the IS estimate is below the bound on average: check the weights")
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
def _hydra_main(cfg: DictConfig) -> None:
    from vgp_bench.train import USER_ERRORS, EvaluationInterrupted, evaluate_checkpoint

    if OmegaConf.is_missing(cfg, "checkpoint") or not cfg.checkpoint:
        print(
            "vgp-eval: error: checkpoint is required: vgp-eval "
            "checkpoint=outputs/<run>/checkpoints/last.pt",
            file=sys.stderr,
        )
        sys.exit(1)
    try:
        summary = evaluate_checkpoint(
            cfg.checkpoint, cfg.eval, device_name=cfg.device, data_dir=cfg.data_dir
        )
    except EvaluationInterrupted as signal_name:
        print(f"vgp-eval: {signal_name}: stopped; nothing was recorded", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        text = one_line_error(error, expected=isinstance(error, USER_ERRORS))
        notes = "; ".join(getattr(error, "__notes__", []))
        print(f"vgp-eval: error: {text}" + (f" ({notes})" if notes else ""), file=sys.stderr)
        sys.exit(1)
    print(format_summary(summary))
    print(OmegaConf.to_yaml(OmegaConf.create({"test": summary})).strip())


def main() -> None:
    _hydra_main()


if __name__ == "__main__":
    main()
