"""vgp-bench's Hydra plugins (Hydra instantiates sweepers and launchers from hydra_plugins only):
the sweeper that reports unfinished jobs and the SLURM launcher that waits for every job."""

from __future__ import annotations


def register_plugins() -> None:
    """Make them known to Hydra by hand: Hydra's scan of hydra_plugins misses packages of an
    editable install (setuptools' import hook lists no modules)."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.vgp_bench_plugins import slurm_launcher, sweeper

    Plugins.instance().register(sweeper.ReportingSweeper)
    if hasattr(slurm_launcher, "SlurmLauncher"):  # with hydra-submitit-launcher installed
        Plugins.instance().register(slurm_launcher.SlurmLauncher)
