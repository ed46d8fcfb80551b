"""The command that measures what reproducing each paper row costs and draws its tables.

scripts/reproduction_costs.py --out results/reproduction   # costs.md and costs.json, and
                                                           # the table in README.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vgp_bench.studies import runs
from vgp_bench.studies.paper_rows import TOP_README
from vgp_bench.studies.readme import readme_path, render
from vgp_bench.studies.reproduction import markdown


def write_tables(folder: Path, record: dict[str, Any]) -> None:
    """costs.md in `folder`, and the top-level README's tables when the folder is the
    checkout's (studies/paper_rows.py draws them from the costs.json just written)."""
    (folder / "costs.md").write_text(markdown(record))
    if folder.resolve() == runs.RESULTS / "reproduction":
        readme = readme_path(TOP_README)
        readme.write_text(render(readme.read_text(), TOP_README))


def main(argv: Sequence[str] | None = None) -> None:
    """Measure the rows asked for (or with --render only redraw) and write the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/reproduction"))
    parser.add_argument(
        "--rows", nargs="*", help="measure these rows (default: all); the others in costs.json stay"
    )
    parser.add_argument("--render", action="store_true", help="only redraw costs.md")
    parser.add_argument("--note", default="", help="what else ran, e.g. 'the studies paused'")
    args = parser.parse_args(argv)
    if args.render:
        write_tables(args.out, json.loads((args.out / "costs.json").read_text()))
        return
    from vgp_bench.benchmarks.reproduction_costs import ROWS, measure  # torch: measuring only

    rows = ROWS if args.rows is None else args.rows
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}; the rows are {ROWS}")
    record = measure(args.out, rows, args.note)
    write_tables(args.out, record)
    print(markdown(record))
