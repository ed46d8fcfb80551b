"""`hydra.sweeper` of vgp-train: see vgp_bench.sweeps.sweeper."""

from __future__ import annotations

from vgp_bench.sweeps import sweeper as sweep


class ReportingSweeper(sweep.ReportingSweeper):
    """Hydra's basic sweeper, ending with one line per job that did not finish and exit 1."""
