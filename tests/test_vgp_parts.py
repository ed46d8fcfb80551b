"""The VGP head composed of parts: one part per option value, checkpoints of the head before the
parts load into it and continue as they did, and the parts stay the head's own parameters."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from vgp_bench.inference.auxiliary import AUX_CORRECTIONS
from vgp_bench.inference.base import SiteSpec
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.inference.vgp_objectives import OBJECTIVES, PAPER_AUXILIARIES
from vgp_bench.inference.vgp_parts import VARIATIONAL_INPUTS, VARIATIONAL_OUTPUTS
from vgp_bench.inference.vgp_warp import MEAN_FIELD_SCALES, PRIOR_MEANS, WARPS

# written by the code of commit 395255d (the head before its parts), see the file's "what"
CHECKPOINTS = Path(__file__).parent / "data" / "vgp_checkpoints_395255d.json"
SPEC = SiteSpec(context_dim=4, z_dim=2)
SMALL = {"variational_data_size": 6, "aux_hidden_dims": (5,), "outputs_rank": 2}
CHOICES = {
    "objective": OBJECTIVES,
    "inputs": VARIATIONAL_INPUTS,
    "outputs": VARIATIONAL_OUTPUTS,
    "mean_field_scale": MEAN_FIELD_SCALES,
    "prior_mean": PRIOR_MEANS,
    "paper_auxiliary": PAPER_AUXILIARIES,
    "warp": WARPS,
    "aux_correction": AUX_CORRECTIONS,
}
# one head per part at least (zero prior mean: every outputs and inputs, context and gp scales)
COMBINATIONS = [
    {"inputs": inputs, "outputs": outputs, "prior_mean": "zero", "mean_field_scale": "context"}
    for inputs in VARIATIONAL_INPUTS
    for outputs in VARIATIONAL_OUTPUTS
] + [
    {"prior_mean": "zero", "mean_field_scale": "gp", "objective": "hierarchical"},
    {"prior_mean": "identity", "mean_field_scale": "tied", "outputs": "global"},
    {"prior_mean": "identity", "mean_field_scale": "context", "warp": "linear"},
    {"prior_mean": "zero", "mean_field_scale": "context", "warp": "linear", "outputs": "low_rank"},
]


def as_tensor(value: list, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(value, dtype=dtype)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_every_choice_is_a_registry_with_one_message_listing_it(key: str) -> None:
    with pytest.raises(ValueError) as refused:
        VGPHead(SPEC, **SMALL, **{key: "nonsense"})
    assert str(refused.value) == (
        f"inference.{key} must be one of {list(CHOICES[key])}, got 'nonsense'"
    )


def checkpoint_cases() -> list[dict]:
    return json.loads(CHECKPOINTS.read_text())["combinations"]


@pytest.mark.parametrize(
    "case", checkpoint_cases(), ids=lambda case: "-".join(map(str, case["options"].values()))
)
def test_a_checkpoint_of_the_head_before_its_parts_loads_and_trains_on(case: dict) -> None:
    """Same keys, same parameter order (an optimizer's state is indexed by it): the old state
    dict and Adam state load, and the head draws and steps as the old code did, float64."""
    document = json.loads(CHECKPOINTS.read_text())
    spec = SiteSpec(**document["spec"])
    context = as_tensor(document["context"])
    torch.manual_seed(1)  # values to be overwritten by the checkpoint
    head = VGPHead(spec, **case["options"]).double()
    assert [name for name, _ in head.named_parameters()] == case["parameter_names"]
    state = {name: as_tensor(value) for name, value in case["state_after_one_step"].items()}
    assert list(head.state_dict()) == list(state)
    head.load_state_dict(state)
    optimizer = torch.optim.Adam(head.parameters(), lr=document["learning_rate"])
    moments = {
        int(index): {
            key: as_tensor(value, torch.float32 if key == "step" else torch.float64)
            for key, value in entry.items()
        }
        for index, entry in case["adam_after_one_step"].items()
    }
    groups = optimizer.state_dict()["param_groups"]
    optimizer.load_state_dict({"state": moments, "param_groups": groups})
    with torch.no_grad():
        draw = head(context, 3, torch.Generator().manual_seed(7))
    torch.testing.assert_close(draw.z, as_tensor(case["draw_z"]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(draw.log_q, as_tensor(case["draw_log_q"]), rtol=1e-12, atol=1e-12)
    sample = head(context, 2, torch.Generator().manual_seed(1))
    optimizer.zero_grad()
    (-sample.log_q.mean()).backward()
    optimizer.step()
    for name, value in head.state_dict().items():
        expected = as_tensor(case["state_after_two_steps"][name])
        torch.testing.assert_close(value, expected, rtol=1e-12, atol=1e-12, msg=name)


def part_parameters(head: VGPHead) -> list[torch.nn.Parameter]:
    parts = head.parts
    modules = (parts.inputs, parts.outputs, parts.mean_field_scale, parts.prior_mean)
    return [parameter for module in modules for parameter in module.parameters()]


@pytest.mark.parametrize("options", COMBINATIONS)
def test_the_parts_parameters_are_the_heads_own(options: dict) -> None:
    """The parts are kept off the module tree; what they hold is registered on the head, so a
    conversion, a copy or a loaded state reaches the tensors the parts compute with."""
    head = VGPHead(SPEC, **SMALL, **options)
    owned = part_parameters(head)
    assert owned and {id(p) for p in owned} <= {id(p) for p in head.parameters()}
    assert len(list(head.parameters())) == len(set(map(id, head.parameters())))
    head.double()
    assert all(parameter.dtype == torch.float64 for parameter in part_parameters(head))
    twin = copy.deepcopy(head)
    assert {id(p) for p in part_parameters(twin)} <= {id(p) for p in twin.parameters()}
    state = {name: torch.full_like(value, 0.25) for name, value in head.state_dict().items()}
    twin.load_state_dict(state)
    assert all(bool((parameter == 0.25).all()) for parameter in part_parameters(twin))
    context = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    site = twin(context, 2, torch.Generator().manual_seed(1))
    assert site.z.shape == (2, 3, 2) and bool(torch.isfinite(site.log_q).all())
