"""The runner's commands: vgp-train, vgp-eval, the sweeper of vgp-train -m and the SLURM
launcher."""
