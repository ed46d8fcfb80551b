"""One set of VGP defaults and one paper's form: VGPOptions declares VGPHead's defaults, which
configs/inference/vgp.yaml states, and configs/inference/vgp_form/paper.yaml is the paper's form
wherever it is used."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from omegaconf import OmegaConf

from tests.helpers import CONFIG_DIR, compose_config, paper_form
from vgp_bench.blackbox import black_box_options, build_head
from vgp_bench.inference.base import SiteSpec
from vgp_bench.inference.vgp import VGPHead
from vgp_bench.inference.vgp_options import VGPOptions
from vgp_bench.inference.vgp_parts import DenseOutputNet, GlobalOutputs
from vgp_bench.inference.vgp_warp import (
    ContextScale,
    IdentityPriorMean,
    TiedScale,
    ZeroPriorMean,
)
from vgp_bench.run.process.runtime import build

PAPER_EXPERIMENTS = [
    "table1_dlgm1_vgp",
    "table1_dlgm2_vgp",
    "table1_dlgm2_vgp_iwae",
    "table1_draw_vgp",
]


def test_vgp_yaml_states_the_declared_defaults() -> None:
    """configs/inference/vgp.yaml gives every option of VGPOptions its declared default, key for
    key, and has no option VGPOptions lacks."""
    config = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "inference" / "vgp.yaml"))
    assert isinstance(config, dict)
    options = {key: value for key, value in config.items() if key not in ("name", "_target_")}
    assert options.pop("_partial_") is True
    declared = {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in dataclasses.asdict(VGPOptions()).items()
    }
    assert options == declared


def test_the_heads_options_are_the_declared_ones() -> None:
    """VGPHead takes exactly VGPOptions' fields, each with the declared default."""
    parameters = dict(inspect.signature(VGPHead).parameters)
    parameters.pop("spec")
    defaults = {name: p.default for name, p in parameters.items()}
    assert defaults == dataclasses.asdict(VGPOptions())


def test_the_default_head_is_the_projects_best_configuration() -> None:
    head = VGPHead(SiteSpec(context_dim=3, z_dim=2), variational_data_size=4)
    assert isinstance(head.parts.prior_mean, IdentityPriorMean)
    assert isinstance(head.parts.outputs, GlobalOutputs)
    assert isinstance(head.parts.mean_field_scale, TiedScale)


def is_paper_form(head: VGPHead) -> bool:
    parts = head.parts
    return (
        isinstance(parts.prior_mean, ZeroPriorMean)
        and isinstance(parts.outputs, DenseOutputNet)
        and isinstance(parts.mean_field_scale, ContextScale)
        and head.kernel.variance.item() == pytest.approx(1.0)
    )


def test_the_paper_form_is_set_in_one_file() -> None:
    """The experiments' base and vgp-fit include configs/inference/vgp_form/paper.yaml and set
    none of its options themselves."""
    form = paper_form()
    assert set(form) == {"prior_mean", "mean_field_scale", "outputs", "kernel_variance"}
    base = OmegaConf.load(CONFIG_DIR / "experiment" / "base" / "paper_vgp.yaml")
    fit = OmegaConf.load(CONFIG_DIR / "fit.yaml")
    assert not set(form) & set(base.inference) and not set(form) & set(fit.head.vgp)
    assert "/inference/vgp_form@inference: paper" in OmegaConf.to_yaml(base.defaults)
    assert "/inference/vgp_form@head.vgp: paper" in OmegaConf.to_yaml(fit.defaults)


@pytest.mark.parametrize("experiment", PAPER_EXPERIMENTS)
def test_the_table1_vgp_rows_are_the_paper_form(experiment: str) -> None:
    cfg = compose_config([f"experiment={experiment}"])
    assert paper_form().items() <= dict(cfg.inference).items()
    head = build(cfg.inference, spec=SiteSpec(context_dim=3, z_dim=2))
    assert is_paper_form(head) and head.data_size == 500


def test_vgp_fit_fits_the_paper_form() -> None:
    composed = compose_config([], config_name="fit").head.vgp
    assert paper_form().items() <= dict(composed).items()
    assert black_box_options("vgp") == dict(composed)
    head = build_head("vgp", 2)
    assert isinstance(head, VGPHead) and is_paper_form(head) and head.data_size == 32


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"objective": "paper", "mean_field_scale": "gp"}, "evaluated by the collapsed weight"),
        ({"warp": "linear", "objective": "hierarchical"}, "warp=linear needs objective=collapsed"),
        ({"warp": "linear", "objective": "paper"}, "warp=linear needs objective=collapsed"),
    ],
)
def test_combinations_that_could_not_be_evaluated_are_refused_at_start(options, says) -> None:
    # both trained, then failed at the test (an assertion) or gave non-finite bounds
    from vgp_bench.errors import ConfigError
    from vgp_bench.inference.base import SiteSpec
    from vgp_bench.inference.vgp import VGPHead

    spec = SiteSpec(context_dim=6, z_dim=3)
    with pytest.raises(ConfigError, match=says):
        VGPHead(spec, prior_mean="zero", variational_data_size=4, **options)
