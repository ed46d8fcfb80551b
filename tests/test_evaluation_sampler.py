"""Evaluation draws its chunks of importance samples from one preparation per batch: the same
log weights as a full forward pass per chunk, bit for bit."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import compose_config
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.models.base import LatentVariableModel
from vgp_bench.run.loop.build import build_components
from vgp_bench.run.loop.evaluate import estimate_split

TINY_DATA = [
    "dataset=synthetic",
    "dataset.shape=[1,8,8]",
    "dataset.n_train=16",
    "dataset.n_valid=8",
    "dataset.n_test=8",
    "device=cpu",
]
FAMILIES = {
    "vae": [
        "model=dlgm2", "model.latent_dims=[3,2]", "model.hidden_dims=[[8],[8]]", "inference=vae",
    ],
    "vgp paper form": [
        "model=dlgm1", "model.latent_dims=[3]", "model.hidden_dims=[[8]]",
        "experiment=table1_dlgm1_vgp", "inference.variational_data_size=8",
        "inference.aux_hidden_dims=[8]", "dataset=synthetic",
    ],
    "vgp default, K = 2": [
        "model=dlgm1", "model.latent_dims=[3]", "model.hidden_dims=[[8]]", "inference=vgp",
        "inference.variational_data_size=8", "inference.aux_hidden_dims=[8]",
        "inference.aux_samples=2",
    ],
    "hvi": [
        "model=dlgm1", "model.latent_dims=[3]", "model.hidden_dims=[[8]]", "inference=hvi",
        "inference.leapfrog_steps=2", "inference.aux_hidden_dims=[8]",
    ],
    "draw (no shortcut)": [
        "model=draw", "model.steps=2", "model.encoder_size=8", "model.decoder_size=8",
        "model.z_dim=2", "model.read_size=2", "model.write_size=2", "inference=vae",
    ],
}  # fmt: skip


def built(overrides: list[str]):
    torch.manual_seed(0)
    return build_components(compose_config([*overrides, *TINY_DATA]))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_prepared_sampler_gives_the_forward_passes_log_weights(family: str) -> None:
    parts = built(FAMILIES[family])
    model: LatentVariableModel = parts.model
    x = parts.data.test.gather(torch.arange(5))
    model.eval()
    parts.heads.eval()
    with torch.no_grad():
        forward_generator = torch.Generator().manual_seed(3)
        expected = [
            model(x, parts.heads, count, forward_generator).log_weights for count in (4, 4, 3)
        ]
        sampler_generator = torch.Generator().manual_seed(3)
        sample = model.log_weight_sampler(x, parts.heads)
        drawn = [sample(count, sampler_generator) for count in (4, 4, 3)]
    for left, right in zip(expected, drawn, strict=True):
        assert left.shape == right.shape and torch.equal(left, right)
    assert torch.equal(forward_generator.get_state(), sampler_generator.get_state())


def test_the_vgp_prepares_once_per_batch_in_an_evaluation(monkeypatch) -> None:
    parts = built(FAMILIES["vgp paper form"])
    calls = []
    original = VGPHead.prepare

    def counted(self, context):
        calls.append(context.shape)
        return original(self, context)

    monkeypatch.setattr(VGPHead, "prepare", counted)
    estimate_split(
        parts.model, parts.heads, parts.data.test, is_samples=12, chunk_size=4, batch_size=4,
        generator=torch.Generator().manual_seed(0), device=torch.device("cpu"),
    )  # fmt: skip
    assert len(calls) == 2  # 8 images in batches of 4; 3 chunks each
