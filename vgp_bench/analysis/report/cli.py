"""`vgp-report`: the paper's Tables 1 and 2 from run folders, next to the paper's numbers.

The command line: find the runs, build the tables, render them in the format asked.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from vgp_bench.analysis.report.curves import write_curves
from vgp_bench.analysis.report.gaps import gap_table
from vgp_bench.analysis.report.paper import TABLE2_DATASET
from vgp_bench.analysis.report.render import render_csv, render_latex, render_markdown
from vgp_bench.analysis.report.rows import Setting, setting_of
from vgp_bench.analysis.report.runs import (
    DEFAULT_ROOTS,
    Run,
    find_run_folders,
    load_run,
    one_per_run,
    one_per_seed,
)
from vgp_bench.analysis.report.tables import Table, excluded_table, likelihood_table, sketch_table
from vgp_bench.catalog import rank


def build_report(
    folders: Sequence[Path], with_paper: bool, include_diverged: bool = False
) -> list[Table]:
    """All tables (MNIST, Sketch, other datasets, not-in-tables, diverged) for the folders."""
    runs, excluded, diverged = [], [], []
    for folder in folders:
        loaded = load_run(folder, include_diverged)
        if isinstance(loaded, Run):
            runs.append(loaded)
        else:
            (diverged if loaded.diverged else excluded).append(loaded)
    runs, copies = one_per_run(runs)
    excluded += copies
    by_dataset: dict[str, dict[Setting, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        setting = setting_of(run)
        by_dataset[setting.dataset][setting].append(run)
    for groups in by_dataset.values():
        for setting, group in groups.items():
            groups[setting], reruns = one_per_seed(group)
            excluded += reruns
    order = sorted(by_dataset, key=lambda name: rank("dataset", name))  # configs/dataset's
    tables: list[Table] = []
    for dataset in order:
        if dataset == TABLE2_DATASET:
            tables.append(sketch_table(by_dataset[dataset], with_paper))
        else:
            tables.append(likelihood_table(dataset, by_dataset[dataset], with_paper))
            gaps = gap_table(dataset, by_dataset[dataset])
            if gaps is not None:
                tables.append(gaps)
    if excluded:
        tables.append(excluded_table(excluded))
    if diverged:
        tables.append(excluded_table(diverged, diverged=True))
    return tables


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
        help="also write the validation-bound curves of every run (finished or not) to PNG, and "
        "the same figure beside it as PDF (vector)",
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
    tables = build_report(folders, args.paper, args.include_diverged)
    if args.curves is not None and not write_curves(folders, args.curves):
        print(f"vgp-report: no validation history to plot in {args.curves}", file=sys.stderr)
    n_excluded = sum(len(table.rows) for table in tables if table.name == "not_in_tables")
    n_diverged = sum(len(table.rows) for table in tables if table.name == "diverged")
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
        sys.stdout.write(render_csv(tables))
    return 0
