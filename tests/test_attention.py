"""DRAW's Gaussian filterbank attention against direct computations."""

from __future__ import annotations

import math

import torch

from vgp_bench.models.attention import (
    FILTER_EPSILON,
    LOG_FILTER_FLOOR,
    AttentionRead,
    AttentionWrite,
    FullRead,
    FullWrite,
    filterbank,
    read,
    window_from_parameters,
    write,
)


def loop_filterbank(
    center: float, stride: float, variance: float, size: int, n: int, floor: float = -math.inf
) -> list:
    """F[i][a] written out with Python loops over i = 1..N and a = 1..size (the exponent
    floored at `floor`)."""
    rows = []
    for i in range(1, n + 1):
        mean = center + (i - n / 2 - 0.5) * stride
        exponents = [-((a - mean) ** 2) / (2 * variance) for a in range(1, size + 1)]
        row = [math.exp(max(exponent, floor)) for exponent in exponents]
        total = sum(row) + FILTER_EPSILON
        rows.append([value / total for value in row])
    return rows


def random_window(shape: tuple[int, ...], height: int, width: int, n: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randn(*shape, 5, generator=generator, dtype=torch.float64)
    return window_from_parameters(raw, height, width, n)


def test_filterbank_matches_python_loops_in_float64():
    generator = torch.Generator().manual_seed(0)
    center = 1 + 7 * torch.rand(2, 3, generator=generator, dtype=torch.float64)
    stride = 0.2 + 2 * torch.rand(2, 3, generator=generator, dtype=torch.float64)
    variance = 0.1 + 3 * torch.rand(2, 3, generator=generator, dtype=torch.float64)
    filters = filterbank(center, stride, variance, size=9, n=4)
    assert filters.shape == (2, 3, 4, 9)
    for s in range(2):
        for b in range(3):
            expected = loop_filterbank(
                center[s, b].item(), stride[s, b].item(), variance[s, b].item(), 9, 4
            )
            torch.testing.assert_close(
                filters[s, b], torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-14
            )


def test_filter_weights_are_floored_and_never_subnormal():
    """Narrow filters far from most pixels: the weights are the formula's with the exponent
    floored (float64 loops), within (size + 1) exp(floor) / epsilon of the unfloored formula's
    (the normalising sum can be as small as epsilon); in float32 no weight is subnormal (the
    slow path of x86 arithmetic), while the unfloored formula makes such weights; gradients
    stay finite."""
    # the last two off the image; the last is the worst case of the bound: one unfloored
    # weight near epsilon, every other one floored
    center = torch.tensor([[2.0, 14.0, 40.0, 29.357 + 4]], dtype=torch.float64)
    stride = torch.tensor([[3.0, 1.0, 2.0, 2.0]], dtype=torch.float64)
    variance = torch.tensor([[0.5, 2.0, 0.05, 0.05]], dtype=torch.float64)
    filters = filterbank(center, stride, variance, size=28, n=5)
    bound = 29 * math.exp(LOG_FILTER_FLOOR) / FILTER_EPSILON  # (size + 1) e^-40 / eps: 1.2e-8
    largest = 0.0
    for b in range(4):
        window = (center[0, b].item(), stride[0, b].item(), variance[0, b].item(), 28, 5)
        floored = torch.tensor(loop_filterbank(*window, LOG_FILTER_FLOOR), dtype=torch.float64)
        torch.testing.assert_close(filters[0, b], floored, rtol=1e-12, atol=0.0)
        unfloored = torch.tensor(loop_filterbank(*window), dtype=torch.float64)
        largest = max(largest, (filters[0, b] - unfloored).abs().max().item())
    assert bound / 10 < largest <= bound  # the worst case comes within a factor of 10
    offsets = torch.arange(1, 6, dtype=torch.float64) - 3
    means = center[..., None] + offsets * stride[..., None]  # [1, 4, 5]
    exponents = -((torch.arange(1, 29) - means[..., None]) ** 2) / (2 * variance[..., None, None])
    assert (exponents < LOG_FILTER_FLOOR).sum() > 300  # of 560: most weights sit at the floor

    raw = torch.tensor([[0.0, 0.9, -3.5, -1.0, 0.0], [1.8, -1.8, -4.0, 0.0, 0.0]])
    raw.requires_grad_(True)
    window = window_from_parameters(raw, 28, 28, 5)
    weights = torch.cat([window.filters_x, window.filters_y], dim=-1)  # [2, 5, 56]
    tiny = torch.finfo(torch.float32).tiny
    assert weights.min() >= math.exp(LOG_FILTER_FLOOR) / 29 > tiny
    unfloored = torch.exp(-((torch.arange(1, 29) - 14.5) ** 2) / (2 * 0.5))  # float32
    assert ((unfloored != 0) & (unfloored < tiny)).sum() > 0  # what the floor avoids
    write(torch.ones(2, 25), window.filters_x, window.filters_y, window.intensity).sum().backward()
    assert raw.grad is not None and torch.isfinite(raw.grad).all()


def test_window_parameters_map_to_paper_grid():
    # g~ = 0 centres the grid at (size + 1) / 2; delta~ = 1 spreads N = size filters over 1..size.
    raw = torch.tensor([0.0, 0.0, math.log(1e-3), 0.0, math.log(3.0)], dtype=torch.float64)
    window = window_from_parameters(raw, height=5, width=5, n=5)
    identity = torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(window.filters_x, identity, atol=1e-6, rtol=0)
    torch.testing.assert_close(window.filters_y, identity, atol=1e-6, rtol=0)
    assert math.isclose(window.intensity.item(), 3.0)
    # g~x = 1 puts the centre at W + 1 = 8 and g~y = -1 at 0; the stride uses max(H, W):
    # delta = (7 - 1) / (3 - 1) * exp(log delta~) = 3 * 2 = 6.
    raw = torch.tensor([1.0, -1.0, 0.0, math.log(2.0), 0.0], dtype=torch.float64)
    window = window_from_parameters(raw, height=4, width=7, n=3)
    six, one = torch.tensor(6.0).double(), torch.tensor(1.0).double()
    expected_x = filterbank(torch.tensor(8.0).double(), six, one, size=7, n=3)
    expected_y = filterbank(torch.tensor(0.0).double(), six, one, size=4, n=3)
    torch.testing.assert_close(window.filters_x, expected_x)
    torch.testing.assert_close(window.filters_y, expected_y)
    assert window.filters_y.argmax(-1).tolist() == [0, 0, 3]  # means -6, 0, 6 on pixels 1..4


def test_read_of_a_single_bright_pixel():
    # A 6 x 8 image, bright pixel at row 3, column 6 (1-based); a 3 x 3 grid centred at
    # (row 3, column 7) with stride 1 sees it in glimpse row 1, column 0 (0-based).
    image = torch.zeros(1, 6, 8, dtype=torch.float64)
    image[0, 2, 5] = 1.0
    one = torch.tensor(1.0, dtype=torch.float64)
    small = torch.tensor(1e-3, dtype=torch.float64)
    filters_x = filterbank(torch.tensor(7.0, dtype=torch.float64), one, small, size=8, n=3)
    filters_y = filterbank(torch.tensor(3.0, dtype=torch.float64), one, small, size=6, n=3)
    glimpse = read(image, filters_x, filters_y, torch.tensor(2.0, dtype=torch.float64))
    expected = torch.zeros(3, 3, dtype=torch.float64)
    expected[1, 0] = 2.0  # gamma = 2
    torch.testing.assert_close(glimpse, expected.flatten(), atol=1e-6, rtol=0)


def test_read_of_a_checkerboard_with_stride_two_sees_one_colour():
    rows, columns = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    image = ((rows + columns) % 2).to(torch.float64).unsqueeze(0)  # [1, 8, 8], 1 at odd sums
    small = torch.tensor(1e-3, dtype=torch.float64)
    two = torch.tensor(2.0, dtype=torch.float64)
    # means 2, 4, 6 (1-based) are 0-based pixels 1, 3, 5: rows + columns even -> colour 0;
    # shifting x by one pixel lands on the other colour.
    filters_y = filterbank(torch.tensor(4.0, dtype=torch.float64), two, small, size=8, n=3)
    on_black = filterbank(torch.tensor(4.0, dtype=torch.float64), two, small, size=8, n=3)
    on_white = filterbank(torch.tensor(5.0, dtype=torch.float64), two, small, size=8, n=3)
    one = torch.tensor(1.0, dtype=torch.float64)
    torch.testing.assert_close(read(image, on_black, filters_y, one), torch.zeros(9).double())
    torch.testing.assert_close(read(image, on_white, filters_y, one), torch.ones(9).double())


def test_write_then_read_with_identity_grid_reproduces_the_image():
    generator = torch.Generator().manual_seed(1)
    image = torch.rand(2, 6, 6, generator=generator, dtype=torch.float64)  # [C, H, W]
    center = torch.tensor(3.5, dtype=torch.float64)  # (6 + 1) / 2
    one = torch.tensor(1.0, dtype=torch.float64)
    filters = filterbank(center, one, torch.tensor(1e-3, dtype=torch.float64), size=6, n=6)
    written = write(image.flatten(), filters, filters, one)
    torch.testing.assert_close(written, image, atol=1e-6, rtol=0)
    torch.testing.assert_close(read(written, filters, filters, one), image.flatten())


def test_write_is_the_adjoint_of_read():
    # <read(x), w> = gamma^2 <x, write(w)> for any window: write applies F^T where read applies F.
    window = random_window((), height=5, width=7, n=3, seed=2)
    generator = torch.Generator().manual_seed(3)
    image = torch.rand(1, 5, 7, generator=generator, dtype=torch.float64)
    patch = torch.randn(9, generator=generator, dtype=torch.float64)
    glimpse = read(image, window.filters_x, window.filters_y, window.intensity)
    canvas = write(patch, window.filters_x, window.filters_y, window.intensity)
    torch.testing.assert_close(
        (glimpse * patch).sum(), window.intensity**2 * (image * canvas).sum()
    )


def test_read_and_write_batch_over_samples_and_data_points():
    window = random_window((2, 3), height=5, width=7, n=3, seed=4)  # [S=2, B=3]
    generator = torch.Generator().manual_seed(5)
    images = torch.rand(2, 3, 1, 5, 7, generator=generator, dtype=torch.float64)
    patches = torch.randn(2, 3, 9, generator=generator, dtype=torch.float64)
    glimpses = read(images, window.filters_x, window.filters_y, window.intensity)
    canvases = write(patches, window.filters_x, window.filters_y, window.intensity)
    assert glimpses.shape == (2, 3, 9) and canvases.shape == (2, 3, 1, 5, 7)
    for s in range(2):
        for b in range(3):
            filters_x, filters_y = window.filters_x[s, b], window.filters_y[s, b]
            intensity = window.intensity[s, b]
            torch.testing.assert_close(
                glimpses[s, b], read(images[s, b], filters_x, filters_y, intensity)
            )
            torch.testing.assert_close(
                canvases[s, b], write(patches[s, b], filters_x, filters_y, intensity)
            )


def test_read_and_write_modules_on_non_square_images():
    torch.manual_seed(0)
    x_shape = (1, 6, 9)
    x = torch.rand(4, 3, *x_shape)  # [S, B, C, H, W]
    decoder_state = torch.randn(4, 3, 16)
    attention_read = AttentionRead(x_shape, decoder_size=16, read_size=2)
    assert (
        attention_read(x, x, decoder_state).shape
        == (4, 3, attention_read.output_dim)
        == (
            4,
            3,
            8,
        )
    )
    full_read = FullRead(x_shape)
    assert full_read(x[0, 0], x, decoder_state).shape == (4, 3, full_read.output_dim)
    assert AttentionWrite(x_shape, 16, write_size=5)(decoder_state).shape == (4, 3, *x_shape)
    assert FullWrite(x_shape, 16)(decoder_state).shape == (4, 3, *x_shape)
