"""The runner, in rooms from the ground up: `process/` (devices, threads, ranks, signals),
`loggers/`, the config checks, `folder/` (the run folder and its records), `loop/` (training and
evaluation) and `commands/` (vgp-train, vgp-eval, the sweeper and the SLURM launcher)."""
