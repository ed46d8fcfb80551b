"""`hydra.sweeper` of vgp-train: see vgp_bench.run.commands.sweep."""

from __future__ import annotations

from vgp_bench.run.commands import sweep


class ReportingSweeper(sweep.ReportingSweeper):
    """Hydra's basic sweeper, ending with one line per job that did not finish and exit 1."""
