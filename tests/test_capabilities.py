"""A family's optional capabilities are declared on the head (with defaults), not probed."""

from __future__ import annotations

import pytest
import torch

from vgp_bench.inference.base import SiteSpec
from vgp_bench.inference.mean_field import MeanFieldHead
from vgp_bench.inference.vgp import VGPHead

SPEC = SiteSpec(context_dim=4, z_dim=2)


def test_a_family_without_a_capability_says_so_by_its_defaults() -> None:
    head = MeanFieldHead(SPEC)
    assert not head.has_diagnostics and not head.has_auxiliary_samples
    assert head.evaluation_weight is None
    assert head.diagnostics(torch.zeros(3, 4), 8) == {}
    missing = pytest.raises(NotImplementedError, match="no auxiliary samples")
    with missing, head.auxiliary_samples(4):
        pass


def test_the_vgp_sets_its_auxiliary_samples_for_a_block_only() -> None:
    head = VGPHead(SPEC, variational_data_size=8, aux_hidden_dims=(8,), aux_samples=2)
    assert head.has_diagnostics and head.has_auxiliary_samples
    assert head.evaluation_weight is not None
    with head.auxiliary_samples(16):
        assert head.aux_samples == 16
    assert head.aux_samples == 2
    with pytest.raises(RuntimeError), head.auxiliary_samples(0):
        assert head.aux_samples == 0
        raise RuntimeError("inside the block")
    assert head.aux_samples == 2
