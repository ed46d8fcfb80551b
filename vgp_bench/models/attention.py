"""DRAW's Gaussian filterbank attention (Gregor et al. 2015, Section 3.2) and full-image read/write.

Pixel coordinates run from 1 to the image size along each axis, so a window centre
g~ = 0 is the exact middle of the image, (size + 1) / 2, and N = size filters with stride 1
put filter i on pixel i. Images are `[..., C, H, W]`; every leading dimension (DRAW's
samples S and batch B) is a batch dimension of the window as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

FILTER_EPSILON = 1e-8  # keeps the normalisation finite when a filter falls outside the image
# The Gaussian weights' exponents are floored at -40 before exp. Unfloored, a narrow window's
# exponents fall below -87 over much of the image, where float32's exp takes a slow path and
# returns subnormal floats (down to about -103; zeros below), and subnormal arithmetic is tens
# of times slower on x86 CPUs: measured, the DRAW evaluation spent about a quarter of its time
# there (docs/performance.md). With the floor every normalised weight is at least
# exp(-40) / (size + epsilon), a normal float (products of two weights can still be
# subnormal), and moves by at most (size + 1) exp(-40) / FILTER_EPSILON, about 1.2e-8 at size
# 28 (the normalising sum can be as small as epsilon when the filter lies off the image). The
# clamp costs no kernel in a forward pass (the negation it replaces moved onto the per-window
# variance); a training step's backward pass gets two more per filter bank (2% of a DRAW step's).
LOG_FILTER_FLOOR = -40.0
WINDOW_PARAMETERS = 5  # (g~x, g~y, log sigma^2, log delta~, log gamma)


@dataclass
class AttentionWindow:
    """A grid of N x N Gaussian filters and its intensity, for a batch of windows."""

    filters_x: Tensor  # [..., N, W]
    filters_y: Tensor  # [..., N, H]
    intensity: Tensor  # [...]  gamma


def filterbank(center: Tensor, stride: Tensor, variance: Tensor, size: int, n: int) -> Tensor:
    """F[i, a] = exp(-(a - mu_i)^2 / (2 sigma^2)) / Z_i with mu_i = g + (i - N/2 - 0.5) delta,
    the exponent floored at LOG_FILTER_FLOOR.

    `center`, `stride` and `variance` share a batch shape `[...]`; i runs over 1..N and the
    pixel coordinate a over 1..size. Each row is normalised over a. Returns `[..., N, size]`.
    """
    offsets = torch.arange(1, n + 1, dtype=center.dtype, device=center.device) - n / 2 - 0.5
    means = center.unsqueeze(-1) + offsets * stride.unsqueeze(-1)  # [..., N]
    pixels = torch.arange(1, size + 1, dtype=center.dtype, device=center.device)  # [size]
    squared_distance = (pixels - means.unsqueeze(-1)).pow(2)  # [..., N, size]
    exponent = squared_distance / (-2.0 * variance[..., None, None])  # [..., N, size]
    filters = torch.exp(exponent.clamp_min(LOG_FILTER_FLOOR))
    return filters / (filters.sum(-1, keepdim=True) + FILTER_EPSILON)


def window_from_parameters(raw: Tensor, height: int, width: int, n: int) -> AttentionWindow:
    """Turn (g~x, g~y, log sigma^2, log delta~, log gamma) `[..., 5]` into an N x N window.

    g = (size + 1) / 2 (g~ + 1) per axis, delta = (max(H, W) - 1) / (N - 1) exp(log delta~),
    one variance and one stride shared by both axes.
    """
    center_x_tilde, center_y_tilde, log_variance, log_stride_tilde, log_intensity = raw.unbind(-1)
    center_x = (width + 1) / 2 * (center_x_tilde + 1)  # [...]
    center_y = (height + 1) / 2 * (center_y_tilde + 1)  # [...]
    stride = (max(height, width) - 1) / max(n - 1, 1) * torch.exp(log_stride_tilde)  # [...]
    variance = torch.exp(log_variance)  # [...]
    return AttentionWindow(
        filters_x=filterbank(center_x, stride, variance, width, n),
        filters_y=filterbank(center_y, stride, variance, height, n),
        intensity=torch.exp(log_intensity),
    )


def read(image: Tensor, filters_x: Tensor, filters_y: Tensor, intensity: Tensor) -> Tensor:
    """The glimpse gamma F_Y x F_X^T of each channel: `[..., C, H, W]` -> `[..., C*N*N]`."""
    glimpse = filters_y.unsqueeze(-3) @ image @ filters_x.transpose(-1, -2).unsqueeze(-3)
    return (intensity[..., None, None, None] * glimpse).flatten(-3)  # [..., C*N*N]


def write(patch: Tensor, filters_x: Tensor, filters_y: Tensor, intensity: Tensor) -> Tensor:
    """The canvas update 1/gamma F_Y^T w F_X of a flat patch: `[..., C*N*N]` -> `[..., C, H, W]`."""
    n = filters_x.shape[-2]
    if patch.shape[-1] % (n * n):
        raise ValueError(f"patch of {patch.shape[-1]} values is not C x {n} x {n}")
    patch = patch.unflatten(-1, (-1, n, n))  # [..., C, N, N]
    image = filters_y.transpose(-1, -2).unsqueeze(-3) @ patch @ filters_x.unsqueeze(-3)
    return image / intensity[..., None, None, None]  # [..., C, H, W]


class AttentionRead(nn.Module):
    """read(x, x^, h_dec) = [gamma F_Y x F_X^T, gamma F_Y x^ F_X^T], window linear in h_dec."""

    def __init__(self, x_shape: tuple[int, int, int], decoder_size: int, read_size: int) -> None:
        super().__init__()
        self.channels, self.height, self.width = x_shape
        self.read_size = read_size
        self.window = nn.Linear(decoder_size, WINDOW_PARAMETERS)
        self.output_dim = 2 * self.channels * read_size * read_size

    def forward(self, x: Tensor, x_error: Tensor, decoder_state: Tensor) -> Tensor:
        """Glimpses of the image and of the error image, `[..., 2*C*N*N]`."""
        window = window_from_parameters(
            self.window(decoder_state), self.height, self.width, self.read_size
        )
        glimpses = [
            read(image, window.filters_x, window.filters_y, window.intensity)
            for image in (x, x_error)
        ]
        return torch.cat(glimpses, dim=-1)


class AttentionWrite(nn.Module):
    """write(h_dec) = 1/gamma F_Y^T w F_X, with the patch w and the window linear in h_dec."""

    def __init__(self, x_shape: tuple[int, int, int], decoder_size: int, write_size: int) -> None:
        super().__init__()
        self.channels, self.height, self.width = x_shape
        self.write_size = write_size
        self.window = nn.Linear(decoder_size, WINDOW_PARAMETERS)
        self.patch = nn.Linear(decoder_size, self.channels * write_size * write_size)

    def forward(self, decoder_state: Tensor) -> Tensor:
        """The canvas update, `[..., C, H, W]`."""
        window = window_from_parameters(
            self.window(decoder_state), self.height, self.width, self.write_size
        )
        return write(
            self.patch(decoder_state), window.filters_x, window.filters_y, window.intensity
        )


class FullRead(nn.Module):
    """read(x, x^, h_dec) = [x, x^]: the whole image and error image, without attention."""

    def __init__(self, x_shape: tuple[int, int, int]) -> None:
        super().__init__()
        channels, height, width = x_shape
        self.output_dim = 2 * channels * height * width

    def forward(self, x: Tensor, x_error: Tensor, decoder_state: Tensor) -> Tensor:
        """Both images flattened, `[..., 2*C*H*W]`."""
        x = x.expand_as(x_error)
        return torch.cat([x.flatten(-3), x_error.flatten(-3)], dim=-1)


class FullWrite(nn.Module):
    """write(h_dec) = W h_dec: a canvas update for every pixel, without attention."""

    def __init__(self, x_shape: tuple[int, int, int], decoder_size: int) -> None:
        super().__init__()
        self.x_shape = tuple(x_shape)
        self.canvas_update = nn.Linear(decoder_size, x_shape[0] * x_shape[1] * x_shape[2])

    def forward(self, decoder_state: Tensor) -> Tensor:
        """The canvas update, `[..., C, H, W]`."""
        return self.canvas_update(decoder_state).unflatten(-1, self.x_shape)


def build_read(
    x_shape: tuple[int, int, int], decoder_size: int, read_size: int, attention: bool
) -> AttentionRead | FullRead:
    """DRAW's read operation: an N x N Gaussian glimpse, or the full image when attention=False."""
    if attention:
        return AttentionRead(x_shape, decoder_size, read_size)
    return FullRead(x_shape)


def build_write(
    x_shape: tuple[int, int, int], decoder_size: int, write_size: int, attention: bool
) -> AttentionWrite | FullWrite:
    """DRAW's write operation: an N x N Gaussian patch, or every pixel when attention=False."""
    if attention:
        return AttentionWrite(x_shape, decoder_size, write_size)
    return FullWrite(x_shape, decoder_size)
