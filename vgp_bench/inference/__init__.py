"""Variational families (heads), one module each; models never import from here but base."""

from vgp_bench.inference.base import SiteSample, SiteSpec, VariationalHead, build_heads

__all__ = ["SiteSample", "SiteSpec", "VariationalHead", "build_heads"]
