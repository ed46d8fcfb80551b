"""The row model every table is made of: what a row measures (Setting), its numbers over seeds
(Estimate), its label and cell text, and its lines in the CSV (`record`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgp_bench.analysis.report.runs import Run, structure_of
from vgp_bench.analysis.standard_error import mean_and_standard_error
from vgp_bench.catalog import option, rank
from vgp_bench.run.config.keys import separates_rows, with_older_defaults
from vgp_bench.run.folder.metrics import DatasetRecord

DEFAULT_TRAIN_OBJECTIVE = "elbo"
DEFAULT_OBJECTIVES = (None, "collapsed")
# Keys naming where files are (`*_dir`, `*_path`), never what a run is
IGNORED_CONFIG_SUFFIXES = ("_dir", "_path")
MISSING = "—"


@dataclass(frozen=True)
class Setting:
    """What a table row is a measurement of; seeds of one Setting are pooled."""

    dataset: str
    model: str
    inference: str
    objective: str | None
    aux_samples: int
    train_objective: str  # trainer.objective: elbo | iwae
    train_samples: int  # trainer.n_samples: k of iwae
    binarization: str
    merge_valid: bool
    is_samples: int
    test_examples: int
    config: tuple[tuple[str, str], ...]
    structure: str | None = None  # a VGP's outputs, prior mean and m (metrics "structure")
    holdout: int | None = None  # dataset.holdout: train+valid pooled, the last N validate


@dataclass(frozen=True)
class Estimate:
    """Mean ± standard error of one quantity over the seeds of a row."""

    mean: float
    stderr: float
    n: int  # seeds pooled; with n = 1 the stderr is the run's own over test images


@dataclass
class Row:
    """One row of a table: its cell text (markdown, LaTeX) and its CSV lines, one per quantity."""

    cells: list[str]
    records: list[dict[str, Any]] = field(default_factory=list)


def setting_of(run: Run) -> Setting:
    """The row a run belongs to."""
    record, test = run.record, run.test
    dataset = record.dataset or DatasetRecord({})
    split_sizes = dataset.split_sizes or {}
    config = tuple(
        sorted(
            (key, value)
            for key, value in with_older_defaults(run.config).items()
            if separates_rows(key)
            and not key.startswith("hydra.")
            and not key.rsplit(".", 1)[-1].endswith(IGNORED_CONFIG_SUFFIXES)
        )
    )
    test_examples = test.n_examples if test.has("n_examples") else split_sizes.get("test", 0)
    return Setting(
        dataset=str(dataset.name if dataset.has("name") else "unknown"),
        model=str(record.model),
        inference=str(record.inference),
        objective=record.objective,
        aux_samples=int(record.aux_samples or test.aux_samples or 0),
        train_objective=str(record.train_objective or DEFAULT_TRAIN_OBJECTIVE),
        train_samples=int(record.train_samples or 1),
        binarization=str(dataset.binarization if dataset.has("binarization") else "unknown"),
        merge_valid=bool(dataset.merge_valid),
        is_samples=int(test.is_samples if test.has("is_samples") else 0),
        test_examples=int(test_examples),
        config=config,
        structure=structure_of(run.folder, record),
        holdout=dataset.holdout,
    )


def estimate(values: Sequence[float], run_stderrs: Sequence[float | None]) -> Estimate:
    """`mean_and_standard_error` over seeds as an Estimate; one seed keeps its own stderr."""
    mean, stderr = mean_and_standard_error(values, run_stderrs[0] if len(values) == 1 else None)
    return Estimate(mean, stderr, len(values))


def test_estimate(runs: Sequence[Run], key: str) -> Estimate:
    """`estimate` of the final test-set `key` (nll or bound_nll) over a row's runs."""
    tests = [run.test.data for run in runs]
    return estimate([test[key] for test in tests], [test.get(f"{key}_stderr") for test in tests])


def seed_of(run: Run) -> int | None:
    return run.record.seed


def format_estimate(value: Estimate | None, marker: str = "") -> str:
    if value is None:
        return MISSING
    spread = "n/a" if math.isnan(value.stderr) else f"{value.stderr:.2f}"
    return f"{value.mean:.2f} ± {spread}{marker}"


def format_difference(ours: Estimate | None, paper: float | None) -> str:
    if ours is None or paper is None:
        return MISSING
    return f"{ours.mean - paper:+.2f}"


def format_seeds(runs: Sequence[Run]) -> str:
    seeds = sorted(str(seed_of(run)) for run in runs)
    return f"n={len(runs)} ({', '.join(seeds)})"


def format_data(setting: Setting) -> str:
    if setting.holdout:
        return f"{setting.binarization}, train+valid less the last {setting.holdout}"
    return setting.binarization + (", train+valid" if setting.merge_valid else "")


def method_label(setting: Setting, table2: bool) -> str:
    """`DLGM 1hl + VGP` (Table 1) or `draw + vgp` (Table 2), plus the family's size, a
    non-default objective, K, a non-default training objective with its k, and a fixed model."""
    if table2:
        base = setting.model + ("" if setting.inference == "vae" else f" + {setting.inference}")
    else:
        family = option("inference", setting.inference).label
        base = f"{option('model', setting.model).label} + {family}"
    variant = [] if setting.structure is None else [setting.structure]
    family_size = option("inference", setting.inference).size  # configs/inference's `# report:`
    if family_size is not None:
        key, symbol = family_size
        size = dict(setting.config).get(f"inference.{key}")
        if size is not None:
            variant.append(f"{symbol}={size}")
    if setting.objective not in DEFAULT_OBJECTIVES:
        variant.append(str(setting.objective))
    if setting.aux_samples:
        variant.append(f"K={setting.aux_samples}")
    if setting.train_objective != DEFAULT_TRAIN_OBJECTIVE:
        variant.append(f"{setting.train_objective.upper()} k={setting.train_samples}")
    if dict(setting.config).get("trainer.train_model") == "false":
        variant.append("model fixed")  # only q trained, on a given model (trainer.init_model)
    return base + (f" ({', '.join(variant)})" if variant else "")


def distinguishing_suffixes(settings: Sequence[Setting], table2: bool) -> dict[Setting, str]:
    """For settings that would share a label: the config keys whose values tell them apart."""
    by_label: dict[str, list[Setting]] = defaultdict(list)
    for setting in settings:
        by_label[method_label(setting, table2)].append(setting)
    suffixes = {setting: "" for setting in settings}
    for group in by_label.values():
        if len(group) < 2:
            continue
        configs = [dict(setting.config) for setting in group]
        keys = sorted({key for config in configs for key in config})
        differing = [key for key in keys if len({config.get(key) for config in configs}) > 1]
        for setting, config in zip(group, configs):
            shown = [f"{key}={config.get(key, 'unset')}" for key in differing[:3]]
            more = f", +{len(differing) - 3} more" if len(differing) > 3 else ""
            suffixes[setting] = f" [{', '.join(shown)}{more}]" if shown else " [same config]"
    return suffixes


def display_folder(folder: Path) -> str:
    try:
        return str(folder.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder)


def sort_key(setting: Setting) -> tuple:
    return (
        *rank("model", setting.model),  # configs/model's and configs/inference's `# report:`
        *rank("inference", setting.inference),
        str(setting.objective),
        setting.aux_samples,
        setting.train_objective,
        setting.train_samples,
        setting.binarization,
        setting.merge_valid,
        setting.is_samples,
        setting.test_examples,
        setting.config,
    )


def record(
    table: str, label: str, setting: Setting | None, runs: Sequence[Run], **fields: Any
) -> dict[str, Any]:
    """One CSV line; a row of a table becomes one line per quantity."""
    base: dict[str, Any] = {"table": table, "method": label}
    if setting is not None:
        base.update(
            dataset=setting.dataset,
            model=setting.model,
            inference=setting.inference,
            objective=setting.objective or "",
            aux_samples=setting.aux_samples,
            train_objective=setting.train_objective,
            train_samples=setting.train_samples,
            binarization=setting.binarization,
            merge_valid=setting.merge_valid,
            is_samples=setting.is_samples,
            test_examples=setting.test_examples,
            n=len(runs),
            seeds=" ".join(sorted(str(seed_of(run)) for run in runs)),
            folders=" ".join(display_folder(run.folder) for run in runs),
        )
    base.update(fields)
    return base
