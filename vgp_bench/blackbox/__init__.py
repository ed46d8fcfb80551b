"""Black-box fitting of a variational family to an unnormalized density (the library API and
`vgp-fit`); `fit` and `families` are the entry points."""

from vgp_bench.blackbox.fitting import FittedFamily, black_box_options, build_head, families, fit

__all__ = ["FittedFamily", "black_box_options", "build_head", "families", "fit"]
