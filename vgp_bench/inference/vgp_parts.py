"""The VGP's variational data as parts: inputs S, outputs T (docs/design.md, sections 2.4 and 2.5).

One part per value of `inference.inputs` and `inference.outputs`, each a module that makes and
owns its parameters; per call it turns the features h `[*batch, F]` into its piece of the
variational data. `VARIATIONAL_INPUTS` and `VARIATIONAL_OUTPUTS` name the choices.

Every part keeps its parameters under the names the head had before the parts existed
(`inputs`, `input_net`, `output_net`, `global_outputs`, `offset_net`, `left_net`, `basis`,
`right_net`): the head registers them under those names (vgp.VGPHead), so checkpoints keep
their keys and their parameter order.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor, nn

from vgp_bench.gp.cholesky import JitteredCholesky
from vgp_bench.gp.conditional import DenseOutputs, LowRankOutputs, VariationalOutputs
from vgp_bench.gp.kernels import ARDKernel

Factorize = Callable[[Tensor], JitteredCholesky]  # S [*I, M, c] -> factor of K_ss + jitter I


class VariationalInputs(nn.Module, ABC):
    """The variational inputs S and the Cholesky factor of K_ss for one call."""

    def __init__(self, features: int, data_size: int, input_dim: int, init_spread: float) -> None:
        super().__init__()
        self.data_size, self.input_dim = data_size, input_dim

    @abstractmethod
    def inputs_and_factor(
        self, features: Tensor, kernel: ARDKernel, factorize: Factorize
    ) -> tuple[Tensor, JitteredCholesky]:
        """S `[M, c]` or `[*batch, M, c]` and the factor of K_ss + jitter I."""


class GlobalInputs(VariationalInputs):
    """Learned inputs S `[M, c]` shared by every example (`inputs=global`), S ~ N(0, I) at start.

    K_ss is then the same at every call: its factor is made once and reused (DRAW calls the
    head once per step). The cache is keyed on the versions of S and of the kernel's parameters
    (an optimizer step or a loaded state renews it) and on the grad mode, and a backward pass
    through K_ss clears it (its graph is then spent).
    """

    def __init__(self, features: int, data_size: int, input_dim: int, init_spread: float) -> None:
        super().__init__(features, data_size, input_dim, init_spread)
        self.inputs = nn.Parameter(torch.randn(data_size, input_dim))
        self._cholesky_cache: tuple[tuple, JitteredCholesky] | None = None

    def inputs_and_factor(
        self, features: Tensor, kernel: ARDKernel, factorize: Factorize
    ) -> tuple[Tensor, JitteredCholesky]:
        return self.inputs, self.cholesky(kernel, factorize)  # S: [M, c]

    def cholesky(self, kernel: ARDKernel, factorize: Factorize) -> JitteredCholesky:
        """The factor of the global K_ss + jitter I, `[M, M]`, made once per minibatch."""
        parameters = [self.inputs, *kernel.parameters()]
        key = (
            tuple(parameter._version for parameter in parameters),
            torch.is_grad_enabled(),
            self.inputs.device,
            self.inputs.dtype,
        )
        if self._cholesky_cache is not None and self._cholesky_cache[0] == key:
            return self._cholesky_cache[1]
        cholesky = factorize(self.inputs)
        graph = cholesky.factor if cholesky.matrix is None else cholesky.matrix
        if graph.requires_grad:  # the backward through K_ss (or the factor) spends the graph
            graph.register_hook(self._forget_cholesky)
        self._cholesky_cache = (key, cholesky)
        return cholesky

    def _forget_cholesky(self, gradient: Tensor) -> None:
        self._cholesky_cache = None


class AmortizedInputs(VariationalInputs):
    """Inputs S(h) `[*batch, M, c]` made per example from the features (`inputs=amortized`, the
    paper's literal Section 3.2): one Cholesky per example. They start at N(0, I) draws that
    depend on h with a relative weight `init_spread`."""

    def __init__(self, features: int, data_size: int, input_dim: int, init_spread: float) -> None:
        super().__init__(features, data_size, input_dim, init_spread)
        self.input_net = nn.Linear(features, data_size * input_dim)
        with torch.no_grad():  # S(h) starts at N(0, I) draws, weakly dependent on h
            self.input_net.weight.mul_(init_spread)
            self.input_net.bias.normal_()

    def inputs_and_factor(
        self, features: Tensor, kernel: ARDKernel, factorize: Factorize
    ) -> tuple[Tensor, JitteredCholesky]:
        batch = features.shape[:-1]
        inputs = self.input_net(features).view(*batch, self.data_size, self.input_dim)
        return inputs, factorize(inputs)  # S: [*batch, M, c]


class VariationalOutputsNet(nn.Module, ABC):
    """The variational outputs T `[*batch or (), M, d_f]` around the prior mean, for one call.

    At the start the t_n are one linear function of the features up to a relative `spread`;
    `start_at_zero` makes T = 0 (the identity prior mean: q then starts mean-field).
    """

    def __init__(
        self,
        features: int,
        data_size: int,
        f_dim: int,
        rank: int,
        spread: float,
        start_at_zero: bool,
    ) -> None:
        super().__init__()
        self.data_size, self.f_dim, self.rank = data_size, f_dim, rank

    @abstractmethod
    def forward(self, features: Tensor) -> VariationalOutputs:
        """T for features `[*batch, F]`."""


class DenseOutputNet(VariationalOutputsNet):
    """T(h) `[*batch, M, d_f]`, a linear layer from the features to all m x d_f outputs
    (`outputs=dense`, the paper's form)."""

    def __init__(
        self,
        features: int,
        data_size: int,
        f_dim: int,
        rank: int,
        spread: float,
        start_at_zero: bool,
    ) -> None:
        super().__init__(features, data_size, f_dim, rank, spread, start_at_zero)
        self.output_net = tied_linear(features, data_size, f_dim, spread)
        if start_at_zero:
            with torch.no_grad():
                self.output_net.weight.zero_()
                self.output_net.bias.zero_()

    def forward(self, features: Tensor) -> DenseOutputs:
        batch = features.shape[:-1]
        return DenseOutputs(self.output_net(features).view(*batch, self.data_size, self.f_dim))

    def start_at(self, table: Tensor) -> None:
        """T(h) = `table` `[M, d_f]` whatever h (the black-box identity start)."""
        with torch.no_grad():
            self.output_net.weight.zero_()
            self.output_net.bias.copy_(table.reshape(-1))  # [M * d_f]


class GlobalOutputs(VariationalOutputsNet):
    """One T `[M, d_f]` shared by all examples (`outputs=global`), N(0, spread^2) at start."""

    def __init__(
        self,
        features: int,
        data_size: int,
        f_dim: int,
        rank: int,
        spread: float,
        start_at_zero: bool,
    ) -> None:
        super().__init__(features, data_size, f_dim, rank, spread, start_at_zero)
        self.global_outputs = nn.Parameter(spread * torch.randn(data_size, f_dim))

    def forward(self, features: Tensor) -> DenseOutputs:
        return DenseOutputs(self.global_outputs)  # [M, d_f], shared by the batch


class FactoredOutputNet(VariationalOutputsNet):
    """T(h) = 1 t0(h)^T + U V(h), t0 `[*batch, d_f]`, V `[*batch, r, d_f]` from the features
    and U `[M, r]` made by `left`; U V starts at the spread of the dense form."""

    def __init__(
        self,
        features: int,
        data_size: int,
        f_dim: int,
        rank: int,
        spread: float,
        start_at_zero: bool,
    ) -> None:
        super().__init__(features, data_size, f_dim, rank, spread, start_at_zero)
        self.offset_net = nn.Linear(features, f_dim)
        self.make_left(features, data_size, rank)
        self.right_net = nn.Linear(features, rank * f_dim)
        with torch.no_grad():  # U V starts at the spread of the dense form
            self.right_net.weight.mul_(spread / math.sqrt(rank))
            self.right_net.bias.mul_(spread / math.sqrt(rank))
            if start_at_zero:
                self.offset_net.weight.zero_()
                self.offset_net.bias.zero_()

    @abstractmethod
    def make_left(self, features: int, data_size: int, rank: int) -> None:
        """Create the parameters of U."""

    @abstractmethod
    def left(self, features: Tensor) -> Tensor:
        """U `[*batch, M, r]` or `[M, r]`."""

    def forward(self, features: Tensor) -> LowRankOutputs:
        batch = features.shape[:-1]
        left = self.left(features)
        return LowRankOutputs(
            offset=self.offset_net(features),  # [*batch, d_f]
            left=left,
            right=self.right_net(features).view(*batch, self.rank, self.f_dim),
        )


class LowRankOutputNet(FactoredOutputNet):
    """T(h) = 1 t0(h)^T + U(h) V(h), U `[*batch, M, r]` per example (`outputs=low_rank`)."""

    def make_left(self, features: int, data_size: int, rank: int) -> None:
        self.left_net = nn.Linear(features, data_size * rank)

    def left(self, features: Tensor) -> Tensor:
        return self.left_net(features).view(*features.shape[:-1], self.data_size, self.rank)


class SharedBasisOutputNet(FactoredOutputNet):
    """T(h) = 1 t0(h)^T + U V(h), one basis U `[M, r]` over the m inputs shared by all
    examples (`outputs=shared_basis`), N(0, 1) at start."""

    def make_left(self, features: int, data_size: int, rank: int) -> None:
        self.basis = nn.Parameter(torch.randn(data_size, rank))

    def left(self, features: Tensor) -> Tensor:
        return self.basis  # [M, r], global


def tied_linear(in_dim: int, rows: int, width: int, spread: float) -> nn.Linear:
    """Linear in_dim -> rows * width whose rows start equal up to a relative `spread`."""
    layer = nn.Linear(in_dim, rows * width)
    common = nn.Linear(in_dim, width)
    with torch.no_grad():
        weight = layer.weight.view(rows, width, in_dim)
        weight.copy_(common.weight + spread * weight)
        bias = layer.bias.view(rows, width)
        bias.copy_(common.bias + spread * bias)
    return layer


VARIATIONAL_INPUTS: dict[str, type[VariationalInputs]] = {
    "global": GlobalInputs,
    "amortized": AmortizedInputs,
}
VARIATIONAL_OUTPUTS: dict[str, type[VariationalOutputsNet]] = {
    "dense": DenseOutputNet,
    "low_rank": LowRankOutputNet,
    "shared_basis": SharedBasisOutputNet,
    "global": GlobalOutputs,
}
