"""Training and evaluation: components from a config, one step, the loop, the evaluations an
epoch and vgp-eval make, early stopping and skipped steps."""
