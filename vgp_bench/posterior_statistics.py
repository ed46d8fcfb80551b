"""How a trained run's q uses its latents, on the validation split: active units and spreads.

For each latent group of the model (`LatentVariableModel.latent_groups`: the DLGM's layers
z1, z2, ...; the whole site elsewhere), over the first `examples` validation images:
- `active_units`: the coordinates u with Cov_x(E_q[u | x]) > `threshold` (0.01, the activity
  measure of Burda, Grosse & Salakhutdinov 2016), with E_q[u | x] the mean of `draws` draws
  of q(z | x) and the variance those draws add to it removed, so any family is measured alike;
- `activity`: Cov_x(E_q[u | x]) summed over the group (how much of z follows x);
- `posterior_std`: the root of E_x[Var_q(u | x)], averaged over coordinates;
and the heads' own statistics (`diagnostics.head_diagnostics`: the VGP's warp share, nonlinear
share, total correlation) on the first `head_examples` validation images. The test split is
never read.

    python -m vgp_bench.posterior_statistics RUN/checkpoints/best.pt ... --out statistics.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vgp_bench.build import checkpoint_config, components_from_checkpoint
from vgp_bench.checkpoint import load_checkpoint
from vgp_bench.data.base import ImageSplit
from vgp_bench.data.store import atomic_write
from vgp_bench.diagnostics import head_diagnostics
from vgp_bench.evaluate import run_folder_of
from vgp_bench.failures import USER_ERRORS
from vgp_bench.inference.base import SiteSample
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.runtime import ConfigError, make_generator

ACTIVITY_THRESHOLD = 0.01  # Burda et al. (2016): a unit is active when Cov_x(E[u | x]) > 0.01


class _MomentRecordingHead(nn.Module):
    """Delegates to `head`, keeping the mean and variance over the draws of each z it returns."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head
        self.means: list[Tensor] = []  # one [B, D] per call
        self.variances: list[Tensor] = []

    def forward(
        self, context: Tensor, n_samples: int, generator: Any = None, **site: Any
    ) -> SiteSample:
        sample = self.head(context, n_samples, generator, **site)
        z = sample.z.detach().double()  # [S, B, D]
        self.means.append(z.mean(0))
        self.variances.append(z.var(0))
        return sample


@torch.no_grad()
def posterior_moments(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    split: ImageSplit,
    draws: int,
    generator: torch.Generator,
    device: torch.device,
    batch_size: int = 100,
    binarization_seed: int = 0,
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per site, the mean and variance of `draws` draws of q(z | x): each `[calls, N, D]`.

    A head called several times in one pass (DRAW's steps) gives one row of `calls` per call.
    Dynamically binarized images are drawn with `binarization_seed`.
    """
    if draws < 2:
        raise ValueError(f"draws={draws}: the variance of the draws needs at least 2")
    was_training = model.training, heads.training
    model.eval()
    heads.eval()
    recorders = nn.ModuleDict({name: _MomentRecordingHead(head) for name, head in heads.items()})
    means: dict[str, list[Tensor]] = {name: [] for name in heads}
    variances: dict[str, list[Tensor]] = {name: [] for name in heads}
    try:
        binarization = torch.Generator().manual_seed(binarization_seed)
        for x in split.batches(batch_size, generator=binarization):
            model(x.to(device), recorders, draws, generator)
            for name, recorder in recorders.items():
                if recorder.means:
                    means[name].append(torch.stack(recorder.means).cpu())  # [calls, B, D]
                    variances[name].append(torch.stack(recorder.variances).cpu())
                recorder.means, recorder.variances = [], []
    finally:
        model.train(was_training[0])
        heads.train(was_training[1])
    return {
        name: (torch.cat(means[name], dim=1), torch.cat(variances[name], dim=1))
        for name in heads
        if means[name]
    }


def coordinate_activity(means: Tensor, variances: Tensor, draws: int) -> Tensor:
    """Cov_x(E_q[u | x]) per coordinate, `[..., D]`, from the draws' means and variances.

    The variance over images of a `draws`-draw mean exceeds that of E_q[u | x] by
    E_x[Var_q(u | x)] / draws on average; that is removed (`means`, `variances`: `[..., N, D]`).
    """
    return means.var(dim=-2) - variances.mean(dim=-2) / draws


def group_statistics(
    means: Tensor,
    variances: Tensor,
    draws: int,
    groups: dict[str, int],
    threshold: float = ACTIVITY_THRESHOLD,
) -> dict[str, dict[str, float]]:
    """`{group: {dims, active_units, activity, posterior_std}}` for one site's moments.

    `groups` names consecutive slices of the site's z; every call of the site counts.
    """
    if sum(groups.values()) != means.shape[-1]:
        raise ValueError(f"latent groups {groups} do not cover the {means.shape[-1]} coordinates")
    activity = coordinate_activity(means, variances, draws)  # [calls, D]
    spread = variances.mean(dim=-2).sqrt()  # [calls, D]: root of E_x Var_q(u | x), unbiased inside
    results: dict[str, dict[str, float]] = {}
    for name, group_activity, group_spread in zip(
        groups,
        activity.split(list(groups.values()), dim=-1),
        spread.split(list(groups.values()), dim=-1),
        strict=True,
    ):
        results[name] = {
            "dims": int(group_activity.numel()),
            "active_units": int((group_activity > threshold).sum()),
            "activity": float(group_activity.sum()),
            "posterior_std": float(group_spread.mean()),
        }
    return results


def checkpoint_statistics(
    checkpoint_path: str | Path,
    examples: int,
    draws: int,
    head_examples: int,
    head_draws: int,
    seed: int,
    data_dir: str | None = None,
    device_name: str = "cpu",
) -> dict[str, Any]:
    """The latent groups' statistics and the heads' own, for one checkpoint."""
    checkpoint = load_checkpoint(checkpoint_path)
    cfg = checkpoint_config(checkpoint, device_name, data_dir)
    parts = components_from_checkpoint(cfg, checkpoint)
    valid = parts.data.valid
    if valid is None or len(valid) == 0:
        raise ConfigError(f"{checkpoint_path}: its dataset has no validation split to measure on")
    moments = posterior_moments(
        parts.model,
        parts.heads,
        valid.subset(min(examples, len(valid))),
        draws,
        make_generator(parts.device, seed),
        parts.device,
        binarization_seed=seed,
    )
    groups: dict[str, dict[str, float]] = {}
    for site, (means, variances) in moments.items():
        for name, values in group_statistics(
            means, variances, draws, parts.model.latent_groups(site)
        ).items():
            groups[name if name == site else f"{site}/{name}"] = values
    x = valid.gather(
        torch.arange(min(head_examples, len(valid))), torch.Generator().manual_seed(seed)
    ).to(parts.device)
    head = head_diagnostics(
        parts.model, parts.heads, x, make_generator(parts.device, seed), n_draws=head_draws
    )
    return {
        "run": run_folder_of(Path(checkpoint_path)).name,
        "checkpoint": str(checkpoint_path),
        "step": int(checkpoint.get("state", {}).get("step", -1)),
        "groups": groups,
        "head": head,
    }


HEAD_COLUMNS = (
    ("warp share", "warp_share"),
    ("nonlinear share", "nonlinear_warp_share"),
    ("variance dispersion", "variance_dispersion"),
    ("total correlation", "total_correlation"),
)


def markdown(record: dict[str, Any]) -> str:
    """The groups' table, then the heads' statistics of the runs that have them."""
    lines = [
        f"Validation split, first {record['examples']} images, {record['draws']} draws each; "
        f"active: Cov_x(E[u | x]) > {record['threshold']}.",
        "",
        "| run | step | group | active units | activity | posterior std |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in record["runs"]:
        for name, values in run["groups"].items():
            lines.append(
                f"| {run['run']} | {run['step']} | {name} | "
                f"{values['active_units']} of {values['dims']} | {values['activity']:.2f} | "
                f"{values['posterior_std']:.3f} |"
            )
    with_head = [run for run in record["runs"] if run["head"]]
    if with_head:
        lines += [
            "",
            f"Heads' statistics, first {record['head_examples']} validation images, "
            f"{record['head_draws']} draws of xi each:",
            "",
            "| run | site | " + " | ".join(label for label, _ in HEAD_COLUMNS) + " |",
            "| --- | --- | " + " | ".join("---" for _ in HEAD_COLUMNS) + " |",
        ]
        for run in with_head:
            sites = sorted({key.split("/")[0] for key in run["head"]})
            for site in sites:
                cells = [
                    f"{run['head'][f'{site}/{key}']:.3g}" if f"{site}/{key}" in run["head"] else "—"
                    for _, key in HEAD_COLUMNS
                ]
                lines.append(f"| {run['run']} | {site} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="runs' checkpoints/best.pt, or one JSON")
    parser.add_argument("--render", action="store_true", help="print the tables of a JSON file")
    parser.add_argument("--examples", type=int, default=2000, help="the first N valid images")
    parser.add_argument("--draws", type=int, default=64, help="draws of q(z | x) per image")
    parser.add_argument("--head-examples", type=int, default=100)
    parser.add_argument("--head-draws", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every run's numbers")
    args = parser.parse_args(argv)
    if args.render:
        print(markdown(json.loads(Path(args.checkpoints[0]).read_text())))
        return 0
    if args.examples < 2 or args.head_examples < 1 or args.head_draws < 2 or args.draws < 2:
        parser.error("--examples and --draws must be at least 2, --head-examples at least 1")
    record: dict[str, Any] = {
        "split": "valid",
        "examples": args.examples,
        "draws": args.draws,
        "threshold": ACTIVITY_THRESHOLD,
        "head_examples": args.head_examples,
        "head_draws": args.head_draws,
        "seed": args.seed,
        "runs": [],
    }
    try:
        for path in args.checkpoints:
            record["runs"].append(
                checkpoint_statistics(
                    path,
                    args.examples,
                    args.draws,
                    args.head_examples,
                    args.head_draws,
                    args.seed,
                    args.data_dir,
                    args.device,
                )
            )
            print(f"measured {path}", file=sys.stderr, flush=True)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(markdown(record))
    if args.out is not None:
        text = json.dumps(record, indent=1) + "\n"
        atomic_write(args.out, lambda stream: stream.write(text.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
