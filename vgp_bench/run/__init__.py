"""The runner: configs, run folders, training, evaluation, checkpoints and the commands."""
