"""DRAW (Gregor et al. 2015): a recurrent canvas model whose q(z_t | h_enc_t) is a site head.

Each step t = 1..T (Section 2 of the DRAW paper):

    x^_t    = x - sigmoid(c_{t-1})
    r_t     = read(x, x^_t, h_dec_{t-1})
    h_enc_t = LSTM_enc(h_enc_{t-1}, [r_t, h_dec_{t-1}])
    z_t     ~ q(z_t | h_enc_t)                     (the head passed in from outside)
    h_dec_t = LSTM_dec(h_dec_{t-1}, z_t)
    c_t     = c_{t-1} + write(h_dec_t)

with p(z_t) = N(0, I) and p(x | z_1:T) = Bernoulli(sigmoid(c_T)). With S importance samples
every sample has its own trajectory, so all states are `[S, B, ...]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vgp_bench.distributions import bernoulli_log_prob, check_binary, standard_normal_log_prob
from vgp_bench.errors import ConfigError
from vgp_bench.inference.base import SiteSpec
from vgp_bench.models.attention import build_read, build_write
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.trace import Trace

FIGURE_STEPS = 8  # columns of the canvas_steps figure


@dataclass
class InferencePass:
    """What one pass of the encoder-decoder over T steps leaves behind."""

    canvas: Tensor  # [S, B, C, H, W]  logits of p(x | z_1:T)
    log_prior: Tensor  # [S, B]  sum_t log N(z_t; 0, I)
    log_q: Tensor  # [S, B]  sum_t log q~(z_t)
    terms: dict[str, Tensor]  # the heads' terms, each summed over steps, [S, B]
    extras: dict[str, Tensor]  # the head's diagnostics at the last step


def lstm_step(
    cell: nn.LSTMCell, inputs: Tensor, state: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """One LSTMCell step on inputs `[..., I]` and state `[..., H]` with any leading dims."""
    hidden, memory = state
    leading = inputs.shape[:-1]
    hidden, memory = cell(
        inputs.reshape(-1, inputs.shape[-1]), (hidden.flatten(0, -2), memory.flatten(0, -2))
    )
    return hidden.unflatten(0, leading), memory.unflatten(0, leading)


def figure_steps(steps: int, count: int = FIGURE_STEPS) -> list[int]:
    """`count` evenly spaced step indices in 0..steps-1, always including the last."""
    positions = torch.linspace(0, steps - 1, min(count, steps)).round().long()
    return sorted(set(positions.tolist()))


class DRAW(LatentVariableModel):
    """Deep Recurrent Attentive Writer with one stochastic site `z`, shared across the T steps."""

    def __init__(
        self,
        x_shape: tuple[int, int, int],
        steps: int = 64,
        read_size: int = 2,
        write_size: int = 5,
        attention: bool = True,
        encoder_size: int = 256,
        decoder_size: int = 256,
        z_dim: int = 100,
    ) -> None:
        super().__init__(x_shape)
        sizes = {
            "steps": steps,
            "read_size": read_size,
            "write_size": write_size,
            "encoder_size": encoder_size,
            "decoder_size": decoder_size,
            "z_dim": z_dim,
        }
        for name, value in sizes.items():
            if int(value) < 1:
                raise ConfigError(f"model.{name} must be a positive integer, got {value}")
        if len(self.x_shape) != 3:
            raise ValueError(f"x_shape must be (C, H, W), got {self.x_shape}")
        self.steps = int(steps)
        self.z_dim = int(z_dim)
        self.decoder_size = int(decoder_size)
        self.reader = build_read(self.x_shape, self.decoder_size, int(read_size), attention)
        self.writer = build_write(self.x_shape, self.decoder_size, int(write_size), attention)
        self.encoder = nn.LSTMCell(self.reader.output_dim + self.decoder_size, int(encoder_size))
        self.decoder = nn.LSTMCell(self.z_dim, self.decoder_size)
        self.sites = {"z": SiteSpec(context_dim=int(encoder_size), z_dim=self.z_dim)}

    def _check_input(self, x: Tensor) -> None:
        if tuple(x.shape[1:]) != self.x_shape or x.dim() != 4:
            raise ValueError(
                f"DRAW expects x of shape [B, {', '.join(map(str, self.x_shape))}], "
                f"got {tuple(x.shape)}"
            )
        if self.checks_inputs:
            check_binary(x)

    def _infer(
        self, x: Tensor, heads: nn.ModuleDict, n_samples: int, generator: torch.Generator | None
    ) -> InferencePass:
        """Run the T steps with z_t drawn from `heads["z"]`; every sample its own trajectory."""
        batch = x.shape[0]
        x = x.unsqueeze(0).expand(n_samples, *x.shape)  # [S, B, C, H, W]
        zeros_encoder = x.new_zeros(n_samples, batch, self.encoder.hidden_size)
        zeros_decoder = x.new_zeros(n_samples, batch, self.decoder_size)
        encoder_state = (zeros_encoder, zeros_encoder)  # [S, B, enc]
        decoder_state = (zeros_decoder, zeros_decoder)  # [S, B, dec]
        canvas = torch.zeros_like(x)  # [S, B, C, H, W]
        log_prior = x.new_zeros(n_samples, batch)
        log_q = x.new_zeros(n_samples, batch)
        terms: dict[str, Tensor] = {}
        extras: dict[str, Tensor] = {}
        for _ in range(self.steps):
            x_error = x - torch.sigmoid(canvas)
            glimpse = self.reader(x, x_error, decoder_state[0])  # [S, B, R]
            encoder_input = torch.cat([glimpse, decoder_state[0]], dim=-1)
            encoder_state = lstm_step(self.encoder, encoder_input, encoder_state)
            site = heads["z"](encoder_state[0], n_samples, generator)  # z [S, B, Z]
            log_prior = log_prior + standard_normal_log_prob(site.z)
            log_q = log_q + site.log_q
            for name, value in site.terms.items():
                terms[name] = terms[name] + value if name in terms else value
            extras = site.site_extras("z")
            decoder_state = lstm_step(self.decoder, site.z, decoder_state)
            canvas = canvas + self.writer(decoder_state[0])
        return InferencePass(canvas, log_prior, log_q, terms, extras)

    def forward(
        self,
        x: Tensor,
        heads: nn.ModuleDict,
        n_samples: int = 1,
        generator: torch.Generator | None = None,
    ) -> Trace:
        """S samples of log p(x, z_1:T) and sum_t log q~(z_t), each `[S, B]`."""
        self._check_input(x)
        inference = self._infer(x, heads, n_samples, generator)
        log_likelihood = bernoulli_log_prob(inference.canvas.flatten(-3), x.flatten(-3))  # [S, B]
        return Trace(
            log_p=log_likelihood + inference.log_prior,
            log_q=inference.log_q,
            terms={
                "log_likelihood": log_likelihood,
                "log_prior": inference.log_prior,
                **inference.terms,
            },
            extras=inference.extras,
        )

    @torch.no_grad()
    def reconstruct(
        self, x: Tensor, heads: nn.ModuleDict, generator: torch.Generator | None = None
    ) -> Tensor:
        """sigmoid(c_T) for one trajectory z_1:T ~ q(. | x), `[B, C, H, W]` (no gradients)."""
        self._check_input(x)
        return torch.sigmoid(self._infer(x, heads, 1, generator).canvas[0])

    def _generate(
        self, n: int, generator: torch.Generator | None, keep_steps: list[int]
    ) -> list[Tensor]:
        """Run the decoder on z_t ~ N(0, I); sigmoid(canvas) `[n, C, H, W]` at `keep_steps`."""
        device = self.decoder.weight_ih.device
        dtype = self.decoder.weight_ih.dtype
        zeros = torch.zeros(n, self.decoder_size, device=device, dtype=dtype)
        decoder_state = (zeros, zeros)  # [n, dec]
        canvas = torch.zeros(n, *self.x_shape, device=device, dtype=dtype)  # [n, C, H, W]
        kept = []
        for step in range(self.steps):
            z = torch.randn(n, self.z_dim, generator=generator, device=device, dtype=dtype)
            decoder_state = self.decoder(z, decoder_state)
            canvas = canvas + self.writer(decoder_state[0])
            if step in keep_steps:
                kept.append(torch.sigmoid(canvas))
        return kept

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """sigmoid(c_T) for n trajectories of the prior, `[n, C, H, W]` (no gradients)."""
        return self._generate(n, generator, [self.steps - 1])[0]

    @torch.no_grad()
    def extra_figures(self, n: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """{"canvas_steps": `[n * k, C, H, W]`}: sigmoid(canvas) of n prior draws at k steps.

        Row-major layout for `make_grid(images, nrow=k)`: image `i * k + j` is sample i at the
        j-th of k evenly spaced steps (k = min(8, T), the last column is the final canvas).
        """
        canvases = self._generate(n, generator, figure_steps(self.steps))  # k x [n, C, H, W]
        return {"canvas_steps": torch.stack(canvases, dim=1).flatten(0, 1)}  # [n * k, C, H, W]
