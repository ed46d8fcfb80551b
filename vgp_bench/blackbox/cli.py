"""`vgp-fit`: fit the VGP and the mean-field family to a 2-D target; print a table, draw a
figure (PNG and PDF)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from vgp_bench.blackbox import FittedFamily, fit
from vgp_bench.catalog import check_fit_families
from vgp_bench.failures import USER_ERRORS, print_error
from vgp_bench.figures.drawing import density_panels_figure, save_figure
from vgp_bench.run.config.command_line import refuse_bad_command_line
from vgp_bench.run.config.settings import check_fit_settings
from vgp_bench.run.config.store import CONFIG_DIR
from vgp_bench.run.process.host_memory import keep_freed_memory
from vgp_bench.run.process.runtime import apply_threads, build
from vgp_bench.run.process.signals import run_command
from vgp_bench.targets import PlotRange, Target


def run(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """Fit every family in `cfg.families` to `cfg.target`; write the PNG and `fit.json`."""
    check_fit_settings(cfg)
    check_fit_families(cfg.families)
    threads = apply_threads(cfg.get("threads"))
    print(f"vgp-fit: {threads}, {keep_freed_memory()}", file=sys.stderr)
    target: Target = build(cfg.target)
    rows: list[dict[str, Any]] = []
    fitted: dict[str, FittedFamily] = {}
    for family in cfg.families:
        node = cfg.head.get(family)
        options = {} if node is None else OmegaConf.to_container(node, resolve=True)
        assert isinstance(options, dict)
        fitted[family] = fit(
            target.log_density,
            target.dim,
            family=family,
            steps=cfg.steps,
            seed=cfg.seed,
            samples_per_step=cfg.samples.per_step,
            learning_rate=cfg.learning_rate,
            final_learning_rate=cfg.final_learning_rate,
            identity_start=cfg.identity_start,
            progress=True,
            **options,
        )
        rows.append(summarize(fitted[family], target, cfg.samples.bound, cfg.samples.importance))
    print(format_table(rows, target, cfg.samples.importance))
    panels = {f"target  log Z = {target.log_normalizer:.3f}": target_density_grid(target)}
    for row in rows:
        samples = fitted[row["family"]].sample(cfg.samples.plot)
        title = f"{row['family']}  bound {row['bound']:.3f}  IS log Z {row['log_z_estimate']:.3f}"
        panels[title] = histogram_grid(samples, target.plot_range)
    picture_path = Path(cfg.out) if cfg.out else output_dir / f"fit-{cfg.target.name}.png"
    picture_path = save_figure(fit_figure(panels, target.plot_range), picture_path)[0]
    result = {
        "target": target.name,
        "true_log_z": target.log_normalizer,
        "importance_samples": cfg.samples.importance,
        "bound_samples": cfg.samples.bound,
        "steps": cfg.steps,
        "seed": cfg.seed,
        "families": rows,
        "picture": str(picture_path),
    }
    (output_dir / "fit.json").write_text(json.dumps(result, indent=2))
    print(f"wrote {picture_path}")
    return result


def summarize(
    fitted: FittedFamily, target: Target, bound_samples: int, importance_samples: int
) -> dict[str, Any]:
    """The numbers of one fitted family against the target's true log Z."""
    bound = fitted.elbo(bound_samples)
    log_z, pareto_k = fitted.log_marginal_with_reliability(importance_samples)
    return {
        "family": fitted.family,
        "bound": bound,
        "log_z_estimate": log_z,
        "pareto_k": pareto_k,
        "bound_gap": target.log_normalizer - bound,
        "estimate_gap": target.log_normalizer - log_z,
        "seconds": fitted.seconds,
        "skipped_steps": fitted.skipped_steps,
    }


def format_table(rows: list[dict[str, Any]], target: Target, importance_samples: int) -> str:
    """A plain-text table: family, bound, IS estimate of log Z, true log Z, the two gaps."""
    header = (
        f"{'family':<12}{'bound':>10}{f'log Z (IS {importance_samples})':>20}"
        f"{'true log Z':>12}{'gap bound':>11}{'gap IS':>9}{'k-hat':>7}{'seconds':>9}"
    )
    lines = [f"target: {target.name}", header, "-" * len(header)]
    unreliable = []
    for row in rows:
        lines.append(
            f"{row['family']:<12}{row['bound']:>10.3f}{row['log_z_estimate']:>20.3f}"
            f"{target.log_normalizer:>12.3f}{row['bound_gap']:>11.3f}{row['estimate_gap']:>9.3f}"
            f"{row['pareto_k']:>7.2f}{row['seconds']:>9.1f}"
        )
        if row["pareto_k"] > 0.7:
            unreliable.append(row["family"])
    if unreliable:
        lines.append(
            f"WARNING: PSIS k-hat > 0.7 for {', '.join(unreliable)}: the importance weights have "
            "(nearly) infinite variance and the IS log Z is not to be trusted"
        )
    return "\n".join(lines)


def grid_centers(plot_range: PlotRange, resolution: int) -> tuple[Tensor, Tensor]:
    """Cell centres along each axis of the plotting box, `[G]` each."""
    (low_x, high_x), (low_y, high_y) = plot_range
    step_x = (high_x - low_x) / resolution
    step_y = (high_y - low_y) / resolution
    x = low_x + step_x * (torch.arange(resolution, dtype=torch.float64) + 0.5)
    y = low_y + step_y * (torch.arange(resolution, dtype=torch.float64) + 0.5)
    return x, y


def target_density_grid(target: Target, resolution: int = 200) -> Tensor:
    """exp(log p~) on a grid over the plotting box, `[G, G]`, row 0 at the top (largest z2)."""
    x, y = grid_centers(target.plot_range, resolution)
    grid_x, grid_y = torch.meshgrid(x, y, indexing="xy")  # [G, G], rows follow y
    points = torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=1)  # [G*G, 2]
    with torch.no_grad():
        log_density = target.log_density(points).reshape(resolution, resolution)
    return torch.exp(log_density - log_density.max()).flip(0)


def histogram_grid(samples: Tensor, plot_range: PlotRange, resolution: int = 200) -> Tensor:
    """Counts of 2-D samples in the cells of the plotting box, `[G, G]`, row 0 at the top."""
    (low_x, high_x), (low_y, high_y) = plot_range
    column = ((samples[:, 0].double() - low_x) / (high_x - low_x) * resolution).floor().long()
    row = ((samples[:, 1].double() - low_y) / (high_y - low_y) * resolution).floor().long()
    inside = (column >= 0) & (column < resolution) & (row >= 0) & (row < resolution)
    flat_index = row[inside] * resolution + column[inside]
    counts = torch.bincount(flat_index, minlength=resolution * resolution).double()
    return counts.reshape(resolution, resolution).flip(0)


def fit_figure(panels: Mapping[str, Tensor], plot_range: PlotRange) -> Figure:
    """The target's density and each family's sample histogram, side by side over the
    plotting box (`density_panels_figure`)."""
    (low_x, high_x), (low_y, high_y) = plot_range
    arrays = {title: values.double().cpu().numpy() for title, values in panels.items()}
    return density_panels_figure(arrays, (low_x, high_x, low_y, high_y))


@hydra.main(config_path=CONFIG_DIR, config_name="fit", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    """Entry point of `vgp-fit`; see `configs/fit.yaml`. Settings are checked before fitting."""
    try:
        run(cfg, Path(HydraConfig.get().runtime.output_dir))
    except USER_ERRORS as error:
        print_error("vgp-fit", error, expected=True)
        sys.exit(1)


def main() -> None:
    """`vgp-fit`; a Ctrl-C stops it with one line."""
    refuse_bad_command_line("vgp-fit", sys.argv[1:])
    run_command("vgp-fit", _hydra_main)


if __name__ == "__main__":
    main()
