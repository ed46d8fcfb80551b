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

from vgp_bench.analysis.report.cli import build_report, main
from vgp_bench.analysis.report.curves import validation_curves, write_curves
from vgp_bench.analysis.report.paper import PAPER
from vgp_bench.analysis.report.runs import (
    Excluded,
    Run,
    chosen_evaluation,
    find_run_folders,
    load_run,
)

__all__ = [
    "PAPER",
    "Excluded",
    "Run",
    "build_report",
    "chosen_evaluation",
    "find_run_folders",
    "load_run",
    "main",
    "validation_curves",
    "write_curves",
]
