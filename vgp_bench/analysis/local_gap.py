"""Per-image approximation gap: each family fitted alone to one image's posterior of a fixed model.

For each of the first N test images, every family is fitted by black-box VI (`blackbox.fit`, the
options of `configs/fit.yaml`) to log p(x, z) of a trained run's model: the best q of that family
for that image, with no encoder. Beside it, the run's own amortized q on the same images. Of the
bound gap log p(x) - ELBO, the fitted q's share is the family's approximation gap and the rest
of the amortized q's is its amortization gap (Cremer, Li & Duvenaud 2018, "Inference
suboptimality in variational autoencoders"). log p(x) is the largest importance-sampled estimate
of the image among all the q's (each is a stochastic lower bound).

    python -m vgp_bench.analysis.local_gap CHECKPOINT --images 10 --out local_gap.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from vgp_bench.blackbox import black_box_options, families, fit
from vgp_bench.errors import ConfigError, UserError
from vgp_bench.files import atomic_write, read_json
from vgp_bench.models.dlgm import DLGM
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.loop.build import checkpoint_config, components_from_checkpoint
from vgp_bench.run.loop.evaluate import estimate_split
from vgp_bench.run.process.runtime import make_generator

# The families compared by default (results/local_gap/); --families takes any of `families()`,
# every configs/inference/ file (a new one with no edit here) and mean_field
DEFAULT_FAMILIES = ("mean_field", "vgp", "planar_flow")
AMORTIZED = "amortized"  # the run's own q, by its encoder


@dataclass
class Estimate:
    """One q's numbers on one image: the bound (ELBO), the IS estimate and its PSIS k-hat."""

    bound: float
    log_likelihood: float
    pareto_k: float
    seconds: float = 0.0


@dataclass
class ImageResult:
    """Every q's numbers on one test image."""

    index: int
    estimates: dict[str, Estimate] = field(default_factory=dict)

    @property
    def log_likelihood(self) -> float:
        """The image's log p(x): the largest IS estimate among the q's."""
        return max(estimate.log_likelihood for estimate in self.estimates.values())

    def gap(self, name: str) -> float:
        """log p(x) - ELBO of the q `name`, in nats."""
        return self.log_likelihood - self.estimates[name].bound


def posterior_log_density(model: torch.nn.Module, pixels: Tensor) -> Callable[[Tensor], Tensor]:
    """z `[n, D]` -> log p(x, z) `[n]` for one image's pixels `[1, P]` under a DLGM."""
    if not isinstance(model, DLGM):
        raise ConfigError(
            f"the local gap needs a model with log p(x, z) in closed form (dlgm1, dlgm2), "
            f"not {type(model).__name__}"
        )

    def log_density(z: Tensor) -> Tensor:
        log_likelihood, log_prior = model.log_joint_terms(pixels, z[:, None, :])  # [n, 1] each
        return (log_likelihood + log_prior)[:, 0]

    return log_density


def fitted_estimate(
    log_density: Callable[[Tensor], Tensor],
    dim: int,
    family: str,
    steps: int,
    seed: int,
    bound_samples: int,
    is_samples: int,
) -> Estimate:
    """Fit `family` to one image's posterior; its bound and IS estimate of log p(x)."""
    fitted = fit(log_density, dim, family=family, steps=steps, seed=seed)  # configs/fit.yaml's
    log_likelihood, pareto_k = fitted.log_marginal_with_reliability(is_samples, chunk_size=1000)
    return Estimate(
        bound=fitted.elbo(bound_samples, chunk_size=1000),
        log_likelihood=log_likelihood,
        pareto_k=pareto_k,
        seconds=fitted.seconds,
    )


def local_gaps(
    checkpoint_path: str | Path,
    images: int,
    family_names: Sequence[str] = DEFAULT_FAMILIES,
    steps: int = 2000,
    seed: int = 0,
    is_samples: int = 5000,
    data_dir: str | None = None,
    log: Callable[[str], None] = print,
) -> list[ImageResult]:
    """The amortized q and each fitted family on the first `images` test images."""
    unknown = [name for name in family_names if name not in families()]
    if unknown:
        raise ConfigError(f"unknown families {unknown}; choose from {families()}")
    checkpoint = load_checkpoint(checkpoint_path)
    parts = components_from_checkpoint(checkpoint_config(checkpoint, "cpu", data_dir), checkpoint)
    parts.model.requires_grad_(False)
    split = parts.data.test.subset(images)
    amortized = estimate_split(
        parts.model,
        parts.heads,
        split,
        is_samples,
        chunk_size=100,
        batch_size=images,
        generator=make_generator(parts.device, seed),
        device=parts.device,
    )
    # the same images as the amortized estimate's: one batch, binarized (dynamic binarization)
    # by the first draws of a generator with the same seed
    pixels = next(iter(split.batches(images, generator=make_generator(parts.device, seed))))
    pixels = pixels.flatten(1)  # [N, P]
    dim = int(sum(parts.model.latent_dims))
    results = []
    for index in range(images):
        result = ImageResult(index)
        result.estimates[AMORTIZED] = Estimate(
            bound=float(amortized.bound[index]),
            log_likelihood=float(amortized.log_likelihood[index]),
            pareto_k=float(amortized.pareto_k[index])
            if amortized.pareto_k is not None
            else math.nan,
        )
        log_density = posterior_log_density(parts.model, pixels[index : index + 1])
        for name in family_names:
            result.estimates[name] = fitted_estimate(
                log_density, dim, name, steps, seed + index, 2 * is_samples, is_samples
            )
        log(
            f"image {index}: log p(x) {result.log_likelihood:.2f}; gap "
            + ", ".join(f"{name} {result.gap(name):.2f}" for name in result.estimates)
        )
        results.append(result)
    return results


def summary(results: Sequence[ImageResult]) -> dict[str, dict[str, float]]:
    """Per q: mean bound, mean gap log p(x) - ELBO with its standard error over images, and the
    median gap (a black-box fit that fails on one image moves the mean, not the median)."""
    names = list(results[0].estimates)
    table = {}
    for name in names:
        gaps = torch.tensor([result.gap(name) for result in results], dtype=torch.float64)
        bounds = torch.tensor(
            [result.estimates[name].bound for result in results], dtype=torch.float64
        )
        stderr = float(gaps.std() / math.sqrt(len(results))) if len(results) > 1 else math.nan
        table[name] = {
            "bound": float(bounds.mean()),
            "gap": float(gaps.mean()),
            "gap_stderr": stderr,
            "gap_median": float(gaps.median()),
        }
    return table


def markdown(results: Sequence[ImageResult], checkpoint: str) -> str:
    """The summary as a markdown table, with the paired difference to the mean-field fit."""
    table = summary(results)
    lines = [
        f"Per-image gaps on the first {len(results)} test images, model of `{checkpoint}`",
        "",
        "| q | mean ELBO | log p(x) - ELBO | median | minus the mean-field fit's | images |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in table.items():
        if "mean_field" in table and name != "mean_field":
            differences = torch.tensor(
                [result.gap(name) - result.gap("mean_field") for result in results],
                dtype=torch.float64,
            )
            stderr = float(differences.std() / math.sqrt(len(results)))
            versus = f"{float(differences.mean()):+.2f} ± {stderr:.2f}"
            better = int((differences < 0).sum())
            count = f"better on {better} of {len(results)}"
        else:
            versus, count = "—", ""
        gap = f"{row['gap']:.2f} ± {row['gap_stderr']:.2f}"
        median = f"{row['gap_median']:.2f}"
        lines.append(f"| {name} | {row['bound']:.2f} | {gap} | {median} | {versus} | {count} |")
    return "\n".join(lines)


def read_results(record: dict[str, Any]) -> list[ImageResult]:
    """The per-image results of a JSON file written by `--out`."""
    return [
        ImageResult(
            int(image["index"]),
            {name: Estimate(**image[name]) for name in record["summary"]},
        )
        for image in record["per_image"]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "checkpoint", help="a run's checkpoints/best.pt (a dlgm model), or with --render a JSON"
    )
    parser.add_argument("--render", action="store_true", help="print the table of a JSON file")
    parser.add_argument("--images", type=int, default=10, help="the first N test images")
    parser.add_argument(
        "--families",
        nargs="+",
        default=list(DEFAULT_FAMILIES),
        help=f"any of {', '.join(families())} (default: {' '.join(DEFAULT_FAMILIES)})",
    )
    parser.add_argument("--steps", type=int, default=2000, help="black-box steps per fit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--is-samples", type=int, default=5000)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=None, help="JSON of every image's numbers")
    args = parser.parse_args(argv)
    if args.render:
        try:
            record = read_json(args.checkpoint)
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(markdown(read_results(record), record["checkpoint"]))
        return 0
    if args.images < 1 or args.steps < 1 or args.is_samples < 1:
        parser.error("--images, --steps and --is-samples must be at least 1")
    try:
        results = local_gaps(
            args.checkpoint,
            args.images,
            args.families,
            args.steps,
            args.seed,
            args.is_samples,
            args.data_dir,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = markdown(results, args.checkpoint)
    print(text)
    if args.out is not None:
        record: dict[str, Any] = {
            "checkpoint": str(args.checkpoint),
            "images": args.images,
            "steps": args.steps,
            "seed": args.seed,
            "is_samples": args.is_samples,
            "families": {name: black_box_options(name) for name in args.families},
            "summary": summary(results),
            "per_image": [
                {"index": r.index, **{k: asdict(v) for k, v in r.estimates.items()}}
                for r in results
            ],
        }
        text_out = json.dumps(record, indent=1) + "\n"
        atomic_write(args.out, lambda stream: stream.write(text_out.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
