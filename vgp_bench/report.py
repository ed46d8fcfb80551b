"""`vgp-report`: the paper's Tables 1 and 2 from run folders, next to the paper's numbers.

Every folder under the given paths that holds a `metrics.json` is a run. Finished runs with a
test-set evaluation go into the tables, each with its most precise evaluation (the largest
number of importance samples on the full test set, from the end of training or a later
`vgp-eval`); every other run is listed under "Not in the tables" with its status and error.
Diverged runs (a non-finite result, or one worse than giving every pixel probability 1/2)
are listed apart, and enter the tables only with --include-diverged. Runs are pooled over
seeds only when their resolved configs are the same apart from the top-level `seed` (and
machine-specific keys such as `device`), so a smoke run never averages with a full one: two
such groups of one method get a suffix naming the config keys that tell them apart.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vgp_bench.divergence import divergence_reason, is_finite_number, trivial_nll
from vgp_bench.metrics import family_structure
from vgp_bench.plots import line_plot

DEFAULT_ROOTS = ("outputs", "multirun")

# The paper's numbers, in nats as -log p(x) on the test set: Tran, Ranganath & Blei, "The
# Variational Gaussian Process", ICLR 2016, Table 1 (binarized MNIST) and Table 2 (Sketch).
# Table 1 has two columns, "-log p(x)" and "≤"; every row reproduced here has a number in its
# "≤" column, an upper bound on -log p(x). The DLGM + VAE row quotes Burda et al. (2016), whose
# number is an importance-sampled estimate with k = 5000; the DRAW row quotes Gregor et al.
# (2015), a variational bound; the paper does not say which estimator gives its VGP rows.
# The rows of other inference methods quote their papers: NF (k = 80) Rezende & Mohamed (2015),
# HVI (8 leapfrog steps) Salimans et al. (2015), the only row with both columns (85.51 in
# "-log p(x)", an IS estimate, and 88.30 in "≤"), and DLGM 2hl + IWAE (k = 50) Burda et al.
# (2016). A key (model, inference, trainer objective) is a row trained with that objective;
# other objectives fall back to the (model, inference) row. Our dlgm2 + vae has no row in the
# paper. Table 2 gives bounds after 100, 200, 300 epochs.
PAPER: dict[str, dict[tuple[str, ...], Any]] = {
    "table1": {
        ("dlgm1", "vae"): {
            "row": "DLGM + VAE [1] (Burda et al. 2016)",
            "column": "≤",
            "value": 86.76,
        },
        ("dlgm1", "vgp"): {"row": "DLGM 1hl + VGP", "column": "≤", "value": 84.79},
        ("dlgm2", "vgp"): {"row": "DLGM 2hl + VGP", "column": "≤", "value": 81.32},
        ("draw", "vae"): {"row": "DRAW [7] (Gregor et al. 2015)", "column": "≤", "value": 80.97},
        ("draw", "vgp"): {"row": "DRAW + VGP", "column": "≤", "value": 79.88},
        ("dlgm1", "planar_flow"): {
            "row": "DLGM + NF (k = 80) [3] (Rezende & Mohamed 2015)",
            "column": "≤",
            "value": 85.10,
        },
        ("dlgm1", "hvi"): {
            "row": "DLGM + HVI (8 leapfrog steps) [2] (Salimans et al. 2015)",
            "column": "≤",
            "value": 88.30,
            "is_value": 85.51,  # its "-log p(x)" column
        },
        ("dlgm2", "vae", "iwae"): {
            "row": "DLGM 2hl + IWAE (k = 50) [1] (Burda et al. 2016)",
            "column": "≤",
            "value": 82.90,
        },
    },
    "table2": {
        ("draw", "vae"): {100: 526.8, 200: 479.1, 300: 464.5},
        ("draw", "vgp"): {100: 460.1, 200: 444.0, 300: 423.9},
    },
}

MODEL_NAMES = {"dlgm1": "DLGM 1hl", "dlgm2": "DLGM 2hl", "draw": "DRAW"}
MODEL_ORDER = {"dlgm1": 0, "dlgm2": 1, "draw": 2}
INFERENCE_ORDER = {"vae": 0, "vgp": 1, "planar_flow": 2, "hvi": 3}
INFERENCE_NAMES = {"planar_flow": "NF"}  # others: the config name in capitals
# A family's size in its label: config key and symbol (flows k, leapfrog steps L).
FAMILY_SIZES = {
    "planar_flow": ("inference.flow_length", "k"),
    "hvi": ("inference.leapfrog_steps", "L"),
}
DEFAULT_TRAIN_OBJECTIVE = "elbo"
DEFAULT_OBJECTIVES = (None, "collapsed")
TABLE2_DATASET = "sketch"
# Config keys that differ between machines or seeds of one configuration, never in the setting.
IGNORED_CONFIG_KEYS = frozenset({"seed", "device", "data_dir"})
IGNORED_CONFIG_SUFFIXES = ("_dir", "_path")
MISSING = "—"
# -log p(x) of the model that gives every pixel probability 1/2, for runs that did not record
# it (`trivial_nll` in metrics.json): D log 2 nats.
TRIVIAL_NLL = {"mnist": trivial_nll(784)}
OWN_EVALUATION = "end of training"


@dataclass(frozen=True)
class Run:
    """A finished, evaluated run: its folder, its metrics and its flattened resolved config."""

    folder: Path
    metrics: dict[str, Any]  # `test` is the evaluation the tables use
    config: dict[str, str]
    evaluation: str = OWN_EVALUATION  # which evaluation that is


@dataclass(frozen=True)
class Excluded:
    """A run that is in no table, and why."""

    folder: Path
    status: str
    reason: str
    diverged: bool = False


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


@dataclass(frozen=True)
class Estimate:
    """Mean ± standard error of one quantity over the seeds of a row."""

    mean: float
    stderr: float
    n: int  # seeds pooled; with n = 1 the stderr is the run's own over test images


@dataclass
class Table:
    """A rendered-format-neutral table: title, header, rows of cell text and notes."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str]


# ---------------------------------------------------------------- finding and reading runs


def find_run_folders(roots: Iterable[Path]) -> list[Path]:
    """Every folder at or under `roots` with a metrics.json or a Hydra `.hydra/config.yaml`.

    A Hydra run folder without metrics.json is a run that stopped before training started.
    """
    found: set[Path] = set()
    for root in roots:
        markers = [root / "metrics.json", root / ".hydra" / "config.yaml"]
        markers += root.rglob("metrics.json")
        markers += (path for path in root.rglob("config.yaml") if path.parent.name == ".hydra")
        for marker in markers:
            if marker.is_file():
                run = marker.parent.parent if marker.parent.name == ".hydra" else marker.parent
                found.add(run.resolve())
    return sorted(found)


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys; leaves as JSON text so values compare exactly."""
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): json.dumps(node, sort_keys=True)}


def read_config(folder: Path) -> dict[str, str]:
    """The run's resolved config flattened (config.yaml, else .hydra/config.yaml), or {}."""
    for path in (folder / "config.yaml", folder / ".hydra" / "config.yaml"):
        if path.is_file():
            try:
                container = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            except Exception as error:  # a damaged config must not hide the run's numbers
                print(f"vgp-report: warning: cannot read {path}: {error}", file=sys.stderr)
                return {}
            return flatten(container) if isinstance(container, dict) else {}
    return {}


def one_line(text: Any) -> str:
    """A message squeezed onto one line."""
    return " ".join(str(text).split())


def evaluation_label(test: dict[str, Any]) -> str:
    return f"vgp-eval {test['checkpoint']}" if test.get("checkpoint") else OWN_EVALUATION


def chosen_evaluation(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The most precise current test-set evaluation: full test set first, then the most
    importance samples, then the most examples; the end-of-training one wins ties.

    vgp-eval's evaluations (`evaluations`) count while the run has not trained past them.
    """
    steps = metrics.get("steps")
    candidates = [metrics.get("test")] + [
        evaluation
        for evaluation in metrics.get("evaluations") or []
        if isinstance(evaluation, dict) and evaluation.get("run_steps", steps) == steps
    ]
    candidates = [
        test
        for test in candidates
        if isinstance(test, dict) and test.get("split", "test") == "test"
    ]
    if not candidates:
        return None
    full = ((metrics.get("dataset") or {}).get("split_sizes") or {}).get("test")

    def precision(test: dict[str, Any]) -> tuple:
        examples = test.get("n_examples")
        examples = examples if is_finite_number(examples) else 0
        samples = test.get("is_samples")
        samples = samples if is_finite_number(samples) else 0
        return (full is None or examples >= full, samples, examples)

    return max(candidates, key=precision)


def diverged(metrics: dict[str, Any], test: dict[str, Any]) -> str | None:
    """Why the run counts as diverged (judged on the evaluation the tables would use)."""
    dataset = str((metrics.get("dataset") or {}).get("name"))
    trivial = metrics.get("trivial_nll", TRIVIAL_NLL.get(dataset))
    reason = divergence_reason(test, trivial if is_finite_number(trivial) else None)
    if reason is None and metrics.get("diverged") and test is metrics.get("test"):
        reason = one_line(metrics.get("diverged_reason"))
    return f"diverged: {reason}" if reason else None


def log_hint(folder: Path) -> str:
    """Where to look for what happened: the folder's non-empty logs, if any."""
    logs = sorted(path.name for path in folder.glob("*.log") if path.stat().st_size > 0)
    if logs:
        return f"see {', '.join(logs)} in its folder"
    return "it left no log"


def load_run(folder: Path, include_diverged: bool = False) -> Run | Excluded:
    """Read one run folder; anything that cannot go into a table comes back as Excluded."""
    if not (folder / "metrics.json").exists():
        return Excluded(
            folder,
            "no metrics",
            "no metrics.json: the run stopped before training started "
            f"(or is starting now); {log_hint(folder)}",
        )
    try:
        metrics = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError) as error:
        return Excluded(folder, "unreadable", one_line(f"metrics.json: {error}"))
    if not isinstance(metrics, dict):
        return Excluded(folder, "unreadable", "metrics.json does not hold a JSON object")
    status = str(metrics.get("status", "unknown"))
    if status != "finished":
        error = metrics.get("error")
        reason = one_line(error) if error else f"run is {status}, not finished"
        return Excluded(folder, status, reason)
    test = chosen_evaluation(metrics)
    if test is None:
        return Excluded(folder, status, "no test-set evaluation; run vgp-eval on its checkpoint")
    why_diverged = diverged(metrics, test)
    finite = all(is_finite_number(test.get(key)) for key in ("nll", "bound_nll"))
    if why_diverged and not (include_diverged and finite):
        return Excluded(folder, "diverged", why_diverged, diverged=True)
    for key in ("model", "inference"):
        if not metrics.get(key):
            return Excluded(folder, status, f"metrics.json has no {key!r}")
    return Run(folder, {**metrics, "test": test}, read_config(folder), evaluation_label(test))


def structure_of(folder: Path, metrics: dict[str, Any]) -> str | None:
    """The VGP structure a run recorded, or for runs older than that record, its config's."""
    if "structure" in metrics:
        return metrics["structure"]
    try:
        config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))
    except (OSError, ValueError):
        return None
    inference = config.get("inference") if isinstance(config, dict) else None
    return family_structure(inference) if isinstance(inference, dict) else None


def setting_of(run: Run) -> Setting:
    """The row a run belongs to."""
    metrics, test = run.metrics, run.metrics["test"]
    dataset = metrics.get("dataset") or {}
    split_sizes = dataset.get("split_sizes") or {}
    config = tuple(
        sorted(
            (key, value)
            for key, value in run.config.items()
            if key not in IGNORED_CONFIG_KEYS
            and not key.startswith("hydra.")
            and not key.rsplit(".", 1)[-1].endswith(IGNORED_CONFIG_SUFFIXES)
        )
    )
    return Setting(
        dataset=str(dataset.get("name", "unknown")),
        model=str(metrics["model"]),
        inference=str(metrics["inference"]),
        objective=metrics.get("objective"),
        aux_samples=int(metrics.get("aux_samples") or test.get("aux_samples") or 0),
        train_objective=str(metrics.get("train_objective") or DEFAULT_TRAIN_OBJECTIVE),
        train_samples=int(metrics.get("train_samples") or 1),
        binarization=str(dataset.get("binarization", "unknown")),
        merge_valid=bool(dataset.get("merge_valid", False)),
        is_samples=int(test.get("is_samples", 0)),
        test_examples=int(test.get("n_examples", split_sizes.get("test", 0))),
        config=config,
        structure=structure_of(run.folder, metrics),
    )


# ---------------------------------------------------------------- statistics


def estimate(values: Sequence[float], run_stderrs: Sequence[float | None]) -> Estimate:
    """Mean and standard error over seeds (n - 1 denominator); one seed keeps its own stderr."""
    if len(values) == 1:
        own = run_stderrs[0]
        return Estimate(values[0], own if is_finite_number(own) else math.nan, 1)
    return Estimate(
        statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values)), len(values)
    )


def test_estimate(runs: Sequence[Run], key: str) -> Estimate:
    """`estimate` of the final test-set `key` (nll or bound_nll) over a row's runs."""
    tests = [run.metrics["test"] for run in runs]
    return estimate([test[key] for test in tests], [test.get(f"{key}_stderr") for test in tests])


def seed_of(run: Run) -> int | None:
    return run.metrics.get("seed")


# ---------------------------------------------------------------- cell text


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
    return setting.binarization + (", train+valid" if setting.merge_valid else "")


def method_label(setting: Setting, table2: bool) -> str:
    """`DLGM 1hl + VGP` (Table 1) or `draw + vgp` (Table 2), plus the family's size, a
    non-default objective, K and a non-default training objective with its k."""
    if table2:
        base = setting.model + ("" if setting.inference == "vae" else f" + {setting.inference}")
    else:
        family = INFERENCE_NAMES.get(setting.inference, setting.inference.upper())
        base = f"{MODEL_NAMES.get(setting.model, setting.model)} + {family}"
    variant = [] if setting.structure is None else [setting.structure]
    if setting.inference in FAMILY_SIZES:
        key, symbol = FAMILY_SIZES[setting.inference]
        size = dict(setting.config).get(key)
        if size is not None:
            variant.append(f"{symbol}={size}")
    if setting.objective not in DEFAULT_OBJECTIVES:
        variant.append(str(setting.objective))
    if setting.aux_samples:
        variant.append(f"K={setting.aux_samples}")
    if setting.train_objective != DEFAULT_TRAIN_OBJECTIVE:
        variant.append(f"{setting.train_objective.upper()} k={setting.train_samples}")
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
        MODEL_ORDER.get(setting.model, len(MODEL_ORDER)),
        setting.model,
        INFERENCE_ORDER.get(setting.inference, len(INFERENCE_ORDER)),
        setting.inference,
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


# ---------------------------------------------------------------- the tables

SPREAD_NOTE = (
    "± is the standard error of the mean over seeds (n - 1 denominator) when n > 1; "
    "with n=1 it is the standard error of that run's test-set estimate over test images."
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


def likelihood_table(
    dataset: str, groups: dict[Setting, list[Run]], with_paper: bool
) -> tuple[Table, list[dict[str, Any]]]:
    """Table 1 layout: IS -log p(x) and bound per row, with the paper's number and differences."""
    is_mnist = dataset == "mnist"
    show_paper = with_paper and is_mnist
    headers = ["method", "seeds", "-log p(x) (IS)", "bound"]
    if show_paper:
        headers += ["paper (≤)", "Δ IS", "Δ bound"]
    headers += ["data", "S", "K", "test N", "evaluation"]
    settings = sorted(groups, key=sort_key)
    suffixes = distinguishing_suffixes(settings, table2=False)
    rows, records, any_below = [], [], False
    table_name = "table1" if is_mnist else f"dataset:{dataset}"
    for setting in settings:
        runs = groups[setting]
        nll, bound = test_estimate(runs, "nll"), test_estimate(runs, "bound_nll")
        below = any(run.metrics["test"].get("is_below_bound") for run in runs)
        any_below |= below
        paper_entry = paper_row(setting) if show_paper else None
        paper = paper_entry["value"] if paper_entry else None
        paper_is = paper_entry.get("is_value", paper) if paper_entry else None
        label = method_label(setting, table2=False) + suffixes[setting]
        row = [
            label,
            format_seeds(runs),
            format_estimate(nll, " §" if below else ""),
            format_estimate(bound),
        ]
        if show_paper:
            row += [
                MISSING if paper is None else f"{paper:.2f}",
                format_difference(nll, paper_is),
                format_difference(bound, paper),
            ]
            if paper_is != paper:
                row[-3] += f" (IS {paper_is:.2f})"
        evaluations = ", ".join(sorted({run.evaluation for run in runs}))
        row += [
            format_data(setting),
            str(setting.is_samples),
            str(setting.aux_samples),
            str(setting.test_examples),
            evaluations,
        ]
        rows.append(row)
        for quantity, value, reference in (("nll", nll, paper_is), ("bound_nll", bound, paper)):
            records.append(
                record(
                    table_name,
                    label,
                    setting,
                    runs,
                    quantity=quantity,
                    epoch="",
                    mean=value.mean,
                    stderr=value.stderr,
                    stderr_over="seeds" if value.n > 1 else "test images",
                    paper="" if reference is None else reference,
                    difference="" if reference is None else value.mean - reference,
                    evaluation=evaluations,
                )
            )
    notes = [
        "Test set, nats, lower is better. -log p(x) (IS): importance-sampled estimate with S "
        "samples, a stochastic upper bound on -log p(x); bound: minus the variational bound "
        "(the training objective). K: auxiliary samples of the bound (0 = single sample).",
        SPREAD_NOTE,
        "data: binarization of the images (fixed = one Bernoulli draw, dynamic = a fresh draw "
        "every epoch), and train+valid when the validation set was merged into training. "
        "test N: test images evaluated. evaluation: each run's most precise test-set "
        "evaluation (the full test set first, then the largest S), made at the end of "
        "training or later by vgp-eval on the checkpoint named.",
    ]
    if show_paper:
        notes.append(
            "paper (≤): the paper's Table 1 has columns -log p(x) and ≤; every number we "
            "compare with is in its ≤ column: DLGM + VAE is Burda et al. (2016), an "
            "importance-sampled estimate (k = 5000); DRAW is Gregor et al. (2015), a variational "
            "bound; the paper does not say which estimator gives its VGP rows. NF, HVI and IWAE "
            "quote Rezende & Mohamed (2015), Salimans et al. (2015) and Burda et al. (2016); "
            "HVI also has an IS estimate in the paper's -log p(x) column, shown as (IS ...) and "
            "used for Δ IS. A row trained with IWAE (k samples) is set beside the paper's IWAE "
            "row where it has one, else beside its family's row. DLGM 2hl + VAE has no row in "
            "the paper. Δ = ours - paper (positive: ours is worse)."
        )
    if any_below:
        notes.append(
            "§: in at least one run of this row the IS estimate of log p(x) came out below the "
            "bound (is_below_bound); too few importance samples or a bug: check those runs."
        )
    title = "Table 1: binarized MNIST" if is_mnist else f"Dataset {dataset}"
    return Table(title, headers, rows, notes), records


def mean_over_runs(values: Sequence[Any]) -> Estimate | None:
    """Mean ± standard error over the runs that recorded a quantity (None when none did)."""
    present = [float(value) for value in values if is_finite_number(value)]
    if not present:
        return None
    if len(present) == 1:
        return Estimate(present[0], math.nan, 1)
    return estimate(present, [None] * len(present))


def last_epoch_value(run: Run, key: str) -> Any:
    """`key` of the last history entry that has it (the warp statistics, per epoch)."""
    for entry in reversed(run.metrics.get("history") or []):
        if key in entry:
            return entry[key]
    return None


GAP_COLUMNS: tuple[tuple[str, str, Callable[[Run], Any]], ...] = (
    ("bound - IS", "bound_gap", lambda run: run.metrics["test"].get("bound_gap")),
    ("aux gap", "aux_gap", lambda run: run.metrics["test"].get("aux_gap")),
    ("warp share", "warp_share", lambda run: last_epoch_value(run, "z/warp_share")),
    (
        "nonlinear share",
        "nonlinear_warp_share",
        lambda run: last_epoch_value(run, "z/nonlinear_warp_share"),
    ),
    ("warp rank", "warp_rank", lambda run: last_epoch_value(run, "z/warp_rank")),
    (
        "variance dispersion",
        "variance_dispersion",
        lambda run: last_epoch_value(run, "z/variance_dispersion"),
    ),
    ("k̂ > 0.7", "pareto_k_above_0_7", lambda run: run.metrics["test"].get("pareto_k_above_0_7")),
    ("mean k̂", "pareto_k_mean", lambda run: run.metrics["test"].get("pareto_k_mean")),
)


def gap_table(
    dataset: str, groups: dict[Setting, list[Run]]
) -> tuple[Table | None, list[dict[str, Any]]]:
    """Where the bound goes, per row: the gap to the IS estimate, the share of it that is the
    auxiliary model's, how much z depends on the VGP's latent input, and the reliability of
    the importance weights (DESIGN.md section 2). None when no run recorded any of it."""
    settings = sorted(groups, key=sort_key)
    suffixes = distinguishing_suffixes(settings, table2=False)
    rows, records = [], []
    for setting in settings:
        runs = groups[setting]
        label = method_label(setting, table2=False) + suffixes[setting]
        values = {key: mean_over_runs([read(run) for run in runs]) for _, key, read in GAP_COLUMNS}
        if all(value is None for value in values.values()):
            continue
        row = [label, format_seeds(runs)]
        for _, key, _ in GAP_COLUMNS:
            value = values[key]
            if value is None:
                row.append(MISSING)
            elif key == "pareto_k_above_0_7":
                row.append(f"{100 * value.mean:.1f}%")
            elif key == "warp_rank":
                row.append(f"{value.mean:.0f}")
            elif key.endswith(("share", "dispersion")):
                row.append(f"{value.mean:.3g}")
            else:
                row.append(format_estimate(value))
            if value is not None:
                records.append(
                    record(
                        f"gaps:{dataset}",
                        label,
                        setting,
                        runs,
                        quantity=key,
                        epoch="",
                        mean=value.mean,
                        stderr=value.stderr,
                        stderr_over="seeds" if value.n > 1 else "",
                        paper="",
                        difference="",
                    )
                )
        rows.append(row)
    if not rows:
        return None, []
    notes = [
        "Nats on the test set unless said otherwise. bound - IS: how far the bound lies below "
        "the IS estimate of log p(x), what a better q could gain. aux gap: the bound with "
        "eval.aux_gap_samples auxiliary samples minus the bound without, on the first "
        "eval.aux_gap_examples test images: what a better r could gain (VGP only).",
        "warp share: Var_xi E[z | xi] / E_xi Var(z | xi) over the latent input xi, averaged "
        "over dimensions and 100 validation images at the last epoch (0: the VGP is a "
        "mean-field Gaussian in disguise); nonlinear share: the same for the part no affine "
        "map of xi explains (an affine warp is itself mean-field); warp rank: the directions "
        "E[z | xi] moves in; variance dispersion: Var_xi Var(z | xi) / (E_xi Var(z | xi))^2, how "
        "much the spread of z changes with xi (a scale mixture even under an affine warp).",
        "k̂ > 0.7: share of test images whose importance weights have a PSIS Pareto k-hat above "
        "0.7 (nearly infinite variance: their IS estimate is unreliable at this S); mean k̂ "
        "over images (Vehtari et al.; Yao et al. 2018).",
    ]
    headers = ["method", "seeds", *(title for title, _, _ in GAP_COLUMNS)]
    return Table(f"Where the bound goes: {dataset}", headers, rows, notes), records


def paper_row(setting: Setting) -> dict[str, Any] | None:
    """The paper's Table 1 row for a setting: the training objective's own row, if any."""
    rows = PAPER["table1"]
    if setting.train_objective != DEFAULT_TRAIN_OBJECTIVE:
        own = rows.get((setting.model, setting.inference, setting.train_objective))
        if own is not None:
            return own
    return rows.get((setting.model, setting.inference))


def epoch_value(run: Run, epoch: int) -> tuple[float, float | None, bool] | None:
    """(bound nll, its stderr, from the final test) after `epoch` epochs, when measured."""
    entry = (run.metrics.get("eval_at_epochs") or {}).get(str(epoch))
    if isinstance(entry, dict) and is_finite_number(entry.get("test_bound_nll")):
        return entry["test_bound_nll"], entry.get("test_bound_nll_stderr"), False
    if run.metrics.get("epochs_completed") == epoch:
        test = run.metrics["test"]
        return test["bound_nll"], test.get("bound_nll_stderr"), True
    return None


def sketch_table(
    groups: dict[Setting, list[Run]], with_paper: bool
) -> tuple[Table, list[dict[str, Any]]]:
    """Table 2 layout: the test bound after each evaluated epoch, with the paper's numbers."""
    settings = sorted(groups, key=sort_key)
    epochs = {
        int(epoch)
        for runs in groups.values()
        for run in runs
        for epoch in (run.metrics.get("eval_at_epochs") or {})
    }
    paper_epochs = (
        {epoch for numbers in PAPER["table2"].values() for epoch in numbers}
        if with_paper
        else set()
    )
    epochs = sorted(epochs | paper_epochs)
    headers = ["method", "seeds"]
    for epoch in epochs:
        headers += [f"{epoch} ep"]
        if epoch in paper_epochs:
            headers += [f"paper {epoch}", f"Δ {epoch}"]
    headers += ["final bound", "data", "K"]
    suffixes = distinguishing_suffixes(settings, table2=True)
    rows, records, subset_sizes = [], [], set()
    used_final = partial_cells = False
    for setting in settings:
        runs = groups[setting]
        label = method_label(setting, table2=True) + suffixes[setting]
        paper_numbers = PAPER["table2"].get((setting.model, setting.inference), {})
        row = [label, format_seeds(runs)]
        for epoch in epochs:
            measured = [(run, epoch_value(run, epoch)) for run in runs]
            measured = [(run, value) for run, value in measured if value is not None]
            for run, _ in measured:
                entry = (run.metrics.get("eval_at_epochs") or {}).get(str(epoch))
                if isinstance(entry, dict) and "n_examples" in entry:
                    subset_sizes.add(int(entry["n_examples"]))
            ours = None
            marker = ""
            if measured:
                ours = estimate([v[0] for _, v in measured], [v[1] for _, v in measured])
                if any(v[2] for _, v in measured):
                    marker, used_final = " ‡", True
                if len(measured) != len(runs):
                    marker, partial_cells = f"{marker} (n={len(measured)})", True
            paper = paper_numbers.get(epoch) if with_paper else None
            row.append(format_estimate(ours, marker))
            if epoch in paper_epochs:
                row += [
                    MISSING if paper is None else f"{paper:.1f}",
                    format_difference(ours, paper),
                ]
            if ours is not None:
                records.append(
                    record(
                        "table2",
                        label,
                        setting,
                        [run for run, _ in measured],
                        quantity="bound_nll_at_epoch",
                        epoch=epoch,
                        mean=ours.mean,
                        stderr=ours.stderr,
                        stderr_over="seeds" if ours.n > 1 else "test images",
                        paper="" if paper is None else paper,
                        difference="" if paper is None else ours.mean - paper,
                    )
                )
        final = test_estimate(runs, "bound_nll")
        completed = sorted({str(run.metrics.get("epochs_completed", "?")) for run in runs})
        row += [
            f"{format_estimate(final)} ({'/'.join(completed)} ep)",
            format_data(setting),
            str(setting.aux_samples),
        ]
        rows.append(row)
        records.append(
            record(
                "table2",
                label,
                setting,
                runs,
                quantity="final_bound_nll",
                epoch="/".join(completed),
                mean=final.mean,
                stderr=final.stderr,
                stderr_over="seeds" if final.n > 1 else "test images",
                paper="",
                difference="",
            )
        )
    sizes = ", ".join(str(size) for size in sorted(subset_sizes)) or "unrecorded"
    notes = [
        "Test set, nats, minus the variational bound (an upper bound on -log p(x)), lower is "
        f"better. Epoch columns: evaluated during training on {sizes} test images; final "
        "bound: after the last epoch, on all test images evaluated (epochs in brackets).",
        SPREAD_NOTE,
    ]
    if partial_cells:
        notes.append("(n=k) in a cell: only k of the row's seeds reached that epoch.")
    if used_final:
        notes.append(
            "‡: no evaluation at that epoch was logged; the final test bound of runs "
            "that stopped exactly there is shown instead."
        )
    if with_paper:
        notes.append(
            "paper: the paper's Table 2 (bounds after 100, 200, 300 epochs over the "
            "18,000 training images). Δ = ours - paper (positive: ours is worse)."
        )
    return Table("Table 2: Sketch", headers, rows, notes), records


def excluded_table(
    excluded: Sequence[Excluded], diverged: bool = False
) -> tuple[Table, list[dict[str, Any]]]:
    """The runs in no table (or the diverged ones), with folder, status and error."""
    rows = [[display_folder(run.folder), run.status, run.reason] for run in excluded]
    records = [
        record(
            "diverged" if diverged else "not_in_tables",
            "",
            None,
            [],
            folder=display_folder(run.folder),
            status=run.status,
            error=run.reason,
        )
        for run in excluded
    ]
    if diverged:
        notes = [
            "Finished runs whose test result is not finite or worse than the model that gives "
            "every pixel probability 1/2 (D log 2 nats); --include-diverged puts the finite "
            "ones in the tables."
        ]
        title = "Diverged runs (not in the tables)"
    else:
        notes = [
            "Unfinished (running, interrupted), failed, unevaluated or unreadable runs, and "
            "Hydra run folders without metrics.json."
        ]
        title = "Not in the tables"
    return Table(title, ["folder", "status", "error"], rows, notes), records


# ---------------------------------------------------------------- rendering


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(tables: Sequence[Table], header: str) -> str:
    lines = ["# vgp-report", "", header, ""]
    for table in tables:
        lines += [f"## {table.title}", ""]
        lines.append("| " + " | ".join(markdown_cell(h) for h in table.headers) + " |")
        lines.append("|" + "|".join("---" for _ in table.headers) + "|")
        lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in table.rows]
        lines.append("")
        lines += [f"- {note}" for note in table.notes]
        lines.append("")
    return "\n".join(lines)


LATEX_CHARACTERS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "Δ": r"$\Delta$",
    "—": "--",
    "‡": r"\ddag{}",
    "§": r"\S{}",
    "≤": r"$\leq$",
    "<": r"$<$",
    ">": r"$>$",
    "|": r"$|$",
}


def latex_escape(text: str) -> str:
    return "".join(LATEX_CHARACTERS.get(character, character) for character in text)


def render_latex(tables: Sequence[Table], header: str) -> str:
    lines = ["% vgp-report; needs \\usepackage{booktabs}", f"% {header}", ""]
    for table in tables:
        lines += [
            "\\begin{table}[t]",
            "\\centering",
            "\\footnotesize",
            f"\\caption{{{latex_escape(table.title)}}}",
            "\\begin{tabular}{" + "l" * len(table.headers) + "}",
            "\\toprule",
            " & ".join(latex_escape(h) for h in table.headers) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(latex_escape(c) for c in row) + " \\\\" for row in table.rows]
        lines += ["\\bottomrule", "\\end{tabular}", ""]
        lines += ["\\par " + latex_escape(note) for note in table.notes]
        lines += ["\\end{table}", ""]
    return "\n".join(lines)


CSV_FIELDS = [
    "table",
    "method",
    "dataset",
    "model",
    "inference",
    "objective",
    "aux_samples",
    "train_objective",
    "train_samples",
    "binarization",
    "merge_valid",
    "is_samples",
    "test_examples",
    "n",
    "seeds",
    "quantity",
    "epoch",
    "mean",
    "stderr",
    "stderr_over",
    "paper",
    "difference",
    "folders",
    "folder",
    "status",
    "error",
    "evaluation",
]


def render_csv(records: Sequence[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    return buffer.getvalue()


# ---------------------------------------------------------------- curves


def validation_curves(folders: Sequence[Path]) -> dict[str, list[tuple[float, float]]]:
    """Mean validation bound per epoch for each method (seeds pooled), unfinished runs too."""
    by_label: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        try:
            metrics = json.loads((folder / "metrics.json").read_text())
        except (OSError, ValueError):
            continue
        inference = str(metrics.get("inference"))
        label = f"{MODEL_NAMES.get(str(metrics.get('model')), metrics.get('model'))} + "
        label += inference.upper()
        details = [structure_of(folder, metrics)]
        details.append(f"K={metrics['aux_samples']}" if metrics.get("aux_samples") else None)
        shown = [detail for detail in details if detail]
        if shown:
            label += f" ({', '.join(shown)})"
        for entry in metrics.get("history") or []:
            if is_finite_number(entry.get("valid_bound")):
                by_label[label][int(entry["epoch"])].append(float(entry["valid_bound"]))
    return {
        label: [(epoch, statistics.fmean(values)) for epoch, values in sorted(epochs.items())]
        for label, epochs in sorted(by_label.items())
    }


def write_curves(folders: Sequence[Path], path: Path, skip_epochs: int = 5) -> int:
    """PNG of the validation curves; the y axis fits the epochs after the first `skip_epochs`."""
    series = validation_curves(folders)
    if not series:
        return 0
    late = [y for values in series.values() for x, y in values if x > skip_epochs]
    late = late or [y for values in series.values() for _, y in values]
    margin = 0.05 * (max(late) - min(late) or 1.0)
    line_plot(
        series,
        path,
        "Validation bound per epoch (mean over seeds)",
        "epoch",
        "validation bound (nats, higher is better)",
        y_range=(min(late) - margin, max(late) + margin),
    )
    return len(series)


# ---------------------------------------------------------------- command line


def build_report(
    folders: Sequence[Path], with_paper: bool, include_diverged: bool = False
) -> tuple[list[Table], list[dict]]:
    """All tables (MNIST, Sketch, other datasets, not-in-tables, diverged) for the folders."""
    runs, excluded, diverged = [], [], []
    for folder in folders:
        loaded = load_run(folder, include_diverged)
        if isinstance(loaded, Run):
            runs.append(loaded)
        else:
            (diverged if loaded.diverged else excluded).append(loaded)
    by_dataset: dict[str, dict[Setting, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        setting = setting_of(run)
        by_dataset[setting.dataset][setting].append(run)
    order = sorted(by_dataset, key=lambda name: (name != "mnist", name != TABLE2_DATASET, name))
    tables, records = [], []
    for dataset in order:
        if dataset == TABLE2_DATASET:
            table, rows = sketch_table(by_dataset[dataset], with_paper)
        else:
            table, rows = likelihood_table(dataset, by_dataset[dataset], with_paper)
            gaps, gap_rows = gap_table(dataset, by_dataset[dataset])
            if gaps is not None:
                tables.append(table)
                records += rows
                table, rows = gaps, gap_rows
        tables.append(table)
        records += rows
    if excluded:
        table, rows = excluded_table(excluded)
        tables.append(table)
        records += rows
    if diverged:
        table, rows = excluded_table(diverged, diverged=True)
        tables.append(table)
        records += rows
    return tables, records


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vgp-report", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "run_dirs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run folders or folders above them (default: outputs/ and multirun/ if present)",
    )
    parser.add_argument("--format", choices=("markdown", "latex", "csv"), default="markdown")
    parser.add_argument(
        "--curves",
        type=Path,
        metavar="PNG",
        help="also write the validation-bound curves of every run (finished or not) to PNG",
    )
    parser.add_argument(
        "--include-diverged",
        action="store_true",
        help="put diverged runs with finite results in the tables (default: listed apart)",
    )
    parser.add_argument(
        "--paper",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the paper's numbers and our difference from them (default: on)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the tables for every run found under the given folders."""
    args = parse_arguments(argv)
    if args.run_dirs:
        missing = [str(path) for path in args.run_dirs if not path.is_dir()]
        if missing:
            print(
                f"vgp-report: error: not a folder: {', '.join(missing)}; pass run folders "
                "or the outputs/ or multirun/ folders above them",
                file=sys.stderr,
            )
            return 2
        roots = list(args.run_dirs)
    else:
        roots = [Path(name) for name in DEFAULT_ROOTS if Path(name).is_dir()]
    folders = find_run_folders(roots)
    searched = ", ".join(str(root) for root in roots) or " and ".join(DEFAULT_ROOTS) + " (absent)"
    if not folders:
        print(
            f"vgp-report: no runs found (no metrics.json under {searched}); train with "
            "vgp-train, or pass the folders that hold the runs"
        )
        return 0
    tables, records = build_report(folders, args.paper, args.include_diverged)
    if args.curves is not None and not write_curves(folders, args.curves):
        print(f"vgp-report: no validation history to plot in {args.curves}", file=sys.stderr)
    n_excluded = sum(1 for entry in records if entry["table"] == "not_in_tables")
    n_diverged = sum(1 for entry in records if entry["table"] == "diverged")
    header = (
        f"{len(folders)} run folders under {searched}: "
        f"{len(folders) - n_excluded - n_diverged} in the tables, {n_excluded} not"
        + (f", {n_diverged} diverged." if n_diverged else ".")
    )
    if args.format == "markdown":
        sys.stdout.write(render_markdown(tables, header))
    elif args.format == "latex":
        sys.stdout.write(render_latex(tables, header))
    else:
        sys.stdout.write(render_csv(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
