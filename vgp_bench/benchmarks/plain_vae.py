"""A plain single-file PyTorch VAE of the dlgm1 architecture: the baseline the runner must match."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class PlainVAE(nn.Module):
    """784-200-200-(50) tanh encoder and 50-200-200-784 tanh decoder, Bernoulli likelihood."""

    def __init__(self, pixels: int = 784, hidden: int = 200, latent: int = 50) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(pixels, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 2 * latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, pixels),
        )

    def log_weights(self, x: Tensor, samples: int) -> Tensor:
        """log p(x, z) - log q(z | x) for `samples` draws, `[S, B]`."""
        mean, raw_scale = self.encoder(x).chunk(2, dim=-1)
        scale = F.softplus(raw_scale) + 1e-4
        noise = torch.randn(samples, *mean.shape)
        z = mean + scale * noise
        logits = self.decoder(z)
        log_likelihood = -F.binary_cross_entropy_with_logits(
            logits, x.expand_as(logits), reduction="none"
        ).sum(-1)
        log_prior = -0.5 * (z.pow(2) + math.log(2 * math.pi)).sum(-1)
        log_q = -0.5 * (noise.pow(2) + math.log(2 * math.pi)).sum(-1) - scale.log().sum(-1)
        return log_likelihood + log_prior - log_q


class PlainLoop:
    """The hand-written training loop (RMSProp, batches of flattened binary images `[N, 784]`),
    steppable in blocks so that its time can be interleaved with the runner's."""

    def __init__(self, images: Tensor, batch_size: int = 100) -> None:
        torch.manual_seed(0)
        self.images = images
        self.batch_size = batch_size
        self.model = PlainVAE(images.shape[1])
        self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=1e-3, alpha=0.95, eps=1e-6)
        self.order = torch.randperm(images.shape[0])
        self.step_count = 0

    def run(self, steps: int) -> None:
        for _ in range(steps):
            start = (self.step_count * self.batch_size) % (self.images.shape[0] - self.batch_size)
            x = self.images[self.order[start : start + self.batch_size]]
            loss = -self.model.log_weights(x, 1).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.step_count += 1


@torch.no_grad()
def naive_is(model: PlainVAE, images: Tensor, samples: int, batch_size: int = 100) -> Tensor:
    """The common naive IS loop: one sample of z per forward pass, K passes per batch; `[N]`."""
    estimates = []
    for start in range(0, images.shape[0], batch_size):
        x = images[start : start + batch_size]
        log_weights = torch.stack([model.log_weights(x, 1)[0] for _ in range(samples)])
        estimates.append(torch.logsumexp(log_weights, dim=0) - math.log(samples))
    return torch.cat(estimates)
