"""`hydra/launcher=slurm`: see vgp_bench.sweeps.slurm_launcher (needs the launchers
extra; Hydra imports every plugin module at start, so without hydra-submitit-launcher this one is
empty)."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None:
    from vgp_bench.sweeps import slurm_launcher

    class SlurmLauncher(slurm_launcher.SlurmLauncher):
        """submitit's SLURM launcher that waits for every job of the sweep."""
