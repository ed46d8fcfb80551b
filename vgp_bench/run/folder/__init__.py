"""A run folder: what a start may do to it, one process at a time, its checkpoints, journals
and the typed records of metrics.json (which vgp-report reads without torch)."""
