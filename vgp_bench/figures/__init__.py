"""Figures in PNG and PDF (matplotlib): curves, density panels, and a run's image grids, for
the runner and the analysis alike."""
