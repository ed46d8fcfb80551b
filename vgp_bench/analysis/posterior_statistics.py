"""How a trained run's q uses its latents, on the validation split: active units and spreads.

For each latent group of the model (`LatentVariableModel.latent_groups`: the DLGM's layers
z1, z2, ...; the whole site elsewhere, with every call of it counted: DRAW's T steps give T x Z
coordinates), over the first `examples` validation images:
- `active_units`: the coordinates u with Cov_x(E_q[u | x]) > `threshold` (0.01, the activity
  measure of Burda, Grosse & Salakhutdinov 2016), with E_q[u | x] the mean of `draws` draws
  of q(z | x) and the variance those draws add to it removed, so any family is measured alike;
- `activity`: Cov_x(E_q[u | x]) summed over the group (how much of z follows x);
- `posterior_std`: the root of E_x[Var_q(u | x)], averaged over coordinates;
- `signal_to_noise`: `activity` over sum_u E_x[Var_q(u | x)], free of the group's units (the
  scale of z1 under a learned p(z1 | z2) is arbitrary);
and the heads' own statistics (`diagnostics.head_diagnostics`: the VGP's warp share, nonlinear
share, total correlation; a site's first call, DRAW's first step) on the first `head_examples`
validation images. The test split is never read.

    python -m vgp_bench.analysis.posterior_statistics RUN/checkpoints/best.pt ... \
        --out statistics.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vgp_bench.data.base import ImageSplit
from vgp_bench.diagnostics import RecordingHead, evaluation_mode, head_diagnostics
from vgp_bench.errors import ConfigError, CorruptDataError
from vgp_bench.failures import USER_ERRORS
from vgp_bench.files import atomic_write, read_json
from vgp_bench.inference.base import SiteSample
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run.commands.eval_command import run_folder_of
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.loop.build import checkpoint_config, components_from_checkpoint
from vgp_bench.run.process.runtime import make_generator

ACTIVITY_THRESHOLD = 0.01  # Burda et al. (2016): a unit is active when Cov_x(E[u | x]) > 0.01


@torch.no_grad()
def posterior_moments(
    model: LatentVariableModel,
    heads: nn.ModuleDict,
    split: ImageSplit,
    draws: int,
    generator: torch.Generator,
    device: torch.device,
    binarization: torch.Generator | None = None,
    batch_size: int = 100,
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per site, the mean and variance of `draws` draws of q(z | x): each `[calls, N, D]`.

    A head called several times in one pass (DRAW's steps) gives one row of `calls` per call.
    Dynamically binarized images are drawn with `binarization`. A site no pass drew is an error.
    """
    if draws < 2:
        raise ConfigError(f"draws={draws}: the variance of the draws needs at least 2")
    if len(split) < 2:
        raise ConfigError(f"{len(split)} image(s): a variance over images needs at least 2")
    calls: dict[str, list[tuple[Tensor, Tensor]]] = {name: [] for name in heads}  # this batch's

    def moments(name: str) -> Callable[[Tensor, SiteSample], None]:
        def record(context: Tensor, sample: SiteSample) -> None:
            z = sample.z.detach().double()  # [S, B, D]
            calls[name].append((z.mean(0), z.var(0)))

        return record

    recorders = nn.ModuleDict(
        {name: RecordingHead(head, moments(name)) for name, head in heads.items()}
    )
    means: dict[str, list[Tensor]] = {name: [] for name in heads}
    variances: dict[str, list[Tensor]] = {name: [] for name in heads}
    with evaluation_mode(model, heads):  # the recorders wrap `heads`: no mode of their own
        for x in split.batches(batch_size, generator=binarization):
            model(x.to(device), recorders, draws, generator)
            for name, drawn in calls.items():
                if drawn:
                    means[name].append(torch.stack([m for m, _ in drawn]).cpu())  # [calls, B, D]
                    variances[name].append(torch.stack([v for _, v in drawn]).cpu())
                drawn.clear()
    undrawn = [name for name in heads if not means[name]]
    if undrawn:
        raise ConfigError(f"the model never drew sites {undrawn}: nothing to measure there")
    return {
        name: (torch.cat(means[name], dim=1), torch.cat(variances[name], dim=1)) for name in heads
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
) -> dict[str, dict[str, Any]]:
    """`{group: {dims, active_units, activity, posterior_std, signal_to_noise, ...}}`.

    `groups` names consecutive slices of one site's z; every call of the site counts. Each
    group also keeps its coordinates' activity (`coordinate_activity`, calls in order).
    """
    if sum(groups.values()) != means.shape[-1]:
        raise ValueError(f"latent groups {groups} do not cover the {means.shape[-1]} coordinates")
    activity = coordinate_activity(means, variances, draws)  # [calls, D]
    posterior_variance = variances.mean(dim=-2)  # [calls, D]: E_x Var_q(u | x), unbiased
    results: dict[str, dict[str, Any]] = {}
    for name, group_activity, group_variance in zip(
        groups,
        activity.split(list(groups.values()), dim=-1),
        posterior_variance.split(list(groups.values()), dim=-1),
        strict=True,
    ):
        results[name] = {
            "dims": int(group_activity.numel()),
            "active_units": int((group_activity > threshold).sum()),
            "activity": float(group_activity.sum()),
            "posterior_std": float(group_variance.sqrt().mean()),
            "signal_to_noise": float(group_activity.sum() / group_variance.sum()),
            "coordinate_activity": [round(float(v), 6) for v in group_activity.flatten()],
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
    """The latent groups' statistics and the heads' own, for one checkpoint.

    Fewer images than asked are used when the validation split is smaller; the record says
    how many were.
    """
    checkpoint = load_checkpoint(checkpoint_path)
    try:
        cfg = checkpoint_config(checkpoint, device_name, data_dir)
    except CorruptDataError as error:
        raise CorruptDataError(f"{checkpoint_path}: {error}") from error
    parts = components_from_checkpoint(cfg, checkpoint)
    valid = parts.data.valid
    if valid is None or len(valid) < 2:
        raise ConfigError(f"{checkpoint_path}: its dataset has no validation split to measure on")
    images = min(examples, len(valid))
    moments = posterior_moments(
        parts.model,
        parts.heads,
        valid.subset(images),
        draws,
        make_generator(parts.device, seed),
        parts.device,
        binarization=make_generator(parts.device, seed + 1),
    )
    groups: dict[str, dict[str, Any]] = {}
    for site, (means, variances) in moments.items():
        for name, values in group_statistics(
            means, variances, draws, parts.model.latent_groups(site)
        ).items():
            groups[name if name == site else f"{site}/{name}"] = values
    head_images = min(head_examples, len(valid))
    x = valid.gather(torch.arange(head_images), make_generator(parts.device, seed + 1))
    head_statistics = head_diagnostics(
        parts.model,
        parts.heads,
        x.to(parts.device),
        make_generator(parts.device, seed),
        n_draws=head_draws,
    )
    return {
        "run": run_folder_of(Path(checkpoint_path)).name,
        "checkpoint": str(checkpoint_path),
        "step": int(checkpoint.get("state", {}).get("step", -1)),
        "images": images,
        "head_images": head_images,
        "groups": groups,
        "head": head_statistics,
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
        f"Validation split, the first {record['examples']} images (or all, where fewer: "
        f"'images'), {record['draws']} draws of q(z | x) each; active: Cov_x(E[u | x]) > "
        f"{record['threshold']}; signal/noise: the activity over the summed E_x Var(u | x).",
        "",
        "| run | step | images | group | active units | activity | posterior std | signal/noise |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in record["runs"]:
        for name, values in run["groups"].items():
            lines.append(
                f"| {run['run']} | {run['step']} | {run['images']} | {name} | "
                f"{values['active_units']} of {values['dims']} | {values['activity']:.2f} | "
                f"{values['posterior_std']:.3f} | {values['signal_to_noise']:.3f} |"
            )
    with_head = [run for run in record["runs"] if run["head"]]
    if with_head:
        lines += [
            "",
            f"Heads' statistics (each site's first call), the first {record['head_examples']} "
            f"validation images, {record['head_draws']} draws of xi each:",
            "",
            "| run | site | " + " | ".join(label for label, _ in HEAD_COLUMNS) + " |",
            "| --- | --- | " + " | ".join("---" for _ in HEAD_COLUMNS) + " |",
        ]
        for run in with_head:
            for site in sorted({key.split("/")[0] for key in run["head"]}):
                cells = [
                    f"{run['head'][f'{site}/{key}']:.3g}" if f"{site}/{key}" in run["head"] else "—"
                    for _, key in HEAD_COLUMNS
                ]
                lines.append(f"| {run['run']} | {site} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SETTINGS = ("split", "examples", "draws", "threshold", "head_examples", "head_draws", "seed")


def merged(previous: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """`previous` with the runs of `record` replaced or appended by name; same settings only."""
    differing = [key for key in SETTINGS if previous.get(key) != record.get(key)]
    if differing:
        raise ConfigError(
            f"cannot merge into a file measured with other settings ({', '.join(differing)}); "
            "measure every run again without --merge"
        )
    fresh = {run["run"]: run for run in record["runs"]}
    runs = [fresh.pop(run["run"], run) for run in previous["runs"]]
    return {**record, "runs": [*runs, *fresh.values()]}


def write_text(path: Path, text: str) -> None:
    """`text` into `path`, atomically."""
    atomic_write(path, lambda stream: stream.write(text.encode()))


def main(argv: Sequence[str] | None = None) -> int:
    """Measure checkpoints (or render a JSON with --render); 2 with one line on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="runs' checkpoints/best.pt, or one JSON")
    parser.add_argument("--render", action="store_true", help="print the tables of a JSON file")
    parser.add_argument("--examples", type=int, default=2000, help="the first N valid images")
    parser.add_argument("--draws", type=int, default=64, help="draws of q(z | x) per image")
    parser.add_argument(
        "--head-examples", type=int, default=100, help="valid images for the heads' statistics"
    )
    parser.add_argument("--head-draws", type=int, default=1024, help="draws of xi per image")
    parser.add_argument("--seed", type=int, default=0, help="of the draws (and binarization)")
    parser.add_argument("--data-dir", default=None, help="where the dataset's files are")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every run's numbers")
    parser.add_argument("--markdown", type=Path, default=None, help="the tables, as printed")
    parser.add_argument(
        "--merge", action="store_true", help="keep --out's other runs; replace those measured"
    )
    args = parser.parse_args(argv)
    try:
        if args.render:
            if len(args.checkpoints) != 1:
                parser.error("--render takes one JSON file")
            print(markdown(read_json(args.checkpoints[0])))
            return 0
        if min(args.examples, args.draws, args.head_draws) < 2 or args.head_examples < 1:
            parser.error(
                "--examples, --draws and --head-draws must be at least 2, "
                "--head-examples at least 1"
            )
        if args.merge and args.out is None:
            parser.error("--merge needs --out")
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
        if args.merge and args.out.exists():
            record = merged(read_json(args.out), record)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = markdown(record)
    print(text)
    if args.out is not None:
        write_text(args.out, json.dumps(record, indent=1) + "\n")
    if args.markdown is not None:
        write_text(args.markdown, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
