"""Generative models p(x, z), one module each; none of them knows about inference methods."""
