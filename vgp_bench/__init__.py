"""vgp-bench: experiment runner for the Variational Gaussian Process (Tran et al., 2016)."""

__version__ = "0.1.0"
