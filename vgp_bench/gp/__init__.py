"""GP algebra of the VGP: ARD kernel (Eq. 3), jittered Cholesky, conditional of Eq. 4."""

from vgp_bench.gp.cholesky import JitteredCholesky, cholesky_with_jitter
from vgp_bench.gp.conditional import (
    DenseOutputs,
    LowRankOutputs,
    VariationalOutputs,
    conditional_mean_variance,
    conditional_weights,
    inverse_route,
    uses_inverse_route,
)
from vgp_bench.gp.kernels import ARDKernel, ard_kernel

__all__ = [
    "ARDKernel",
    "DenseOutputs",
    "JitteredCholesky",
    "LowRankOutputs",
    "VariationalOutputs",
    "ard_kernel",
    "cholesky_with_jitter",
    "conditional_mean_variance",
    "conditional_weights",
    "inverse_route",
    "uses_inverse_route",
]
