"""How a multirun is launched and reported: the sweeper that says how each job ended and the
SLURM launcher that waits for every job (hydra_plugins/ hands both to Hydra)."""
