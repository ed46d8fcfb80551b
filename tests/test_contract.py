"""The shared contract: every model x head x objective meets at the site interface.

Shapes [S, B], finite gradients for every parameter, the importance-sampled estimate at or above
the bound, and a one-step run of every experiment config through the real trainer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers import CONFIG_DIR, compose_config
from vgp_bench.estimators import bound, importance_weighted_log_likelihood, training_bound
from vgp_bench.inference.base import build_heads
from vgp_bench.locations import group_options
from vgp_bench.run.commands.train import train
from vgp_bench.run.process.runtime import build

X_SHAPE = (1, 8, 8)
# Every model and family configs/ offers (a new one is one module and one file there)
MODELS = group_options("model")
FAMILIES = group_options("inference")
# Options that make a model or family small enough for a test; one not named runs at its config's
TINY_MODEL = {
    "dlgm1": ["model.latent_dims=[3]", "model.hidden_dims=[[12]]"],
    "dlgm2": ["model.latent_dims=[4,2]", "model.hidden_dims=[[12],[6]]"],
    "draw": [
        "model.steps=3",
        "model.encoder_size=12",
        "model.decoder_size=12",
        "model.z_dim=3",
        "model.read_size=2",
        "model.write_size=3",
    ],
}
TINY_INFERENCE = {
    "vgp": ["inference.variational_data_size=8", "inference.aux_hidden_dims=[8]"],
    "planar_flow": ["inference.flow_length=3"],
    "hvi": ["inference.leapfrog_steps=2", "inference.aux_hidden_dims=[8]"],
}
# The objectives a family is tested with beyond its config's own (None: the config's)
OBJECTIVES = {"vgp": ["collapsed", "hierarchical", "paper"]}
HEADS = [(family, objective) for family in FAMILIES for objective in OBJECTIVES.get(family, [None])]


def tiny(model: str, inference: str, objective: str | None = None) -> list[str]:
    overrides = [
        f"model={model}",
        f"inference={inference}",
        *TINY_MODEL.get(model, []),
        *TINY_INFERENCE.get(inference, []),
    ]
    return overrides + ([f"inference.objective={objective}"] if objective else [])


@pytest.mark.parametrize(("inference", "objective"), HEADS)
@pytest.mark.parametrize("model_name", MODELS)
def test_every_model_with_every_head(model_name: str, inference: str, objective: str | None):
    cfg = compose_config(tiny(model_name, inference, objective))
    torch.manual_seed(0)
    model = build(cfg.model, x_shape=X_SHAPE)
    if inference == "hvi" and not model.sites["z"].offers_log_joint:  # DRAW: sequential sites
        with pytest.raises(ValueError, match=r"^inference=hvi [^\n]* use a model with one joint"):
            build_heads(build(cfg.inference), model.sites)
        return
    heads = build_heads(build(cfg.inference), model.sites)
    generator = torch.Generator().manual_seed(1)
    x = torch.bernoulli(torch.full((3, *X_SHAPE), 0.3), generator=generator)
    trace = model(x, heads, 4, generator)
    assert trace.log_p.shape == trace.log_q.shape == (4, 3)
    assert all(value.shape == (4, 3) for value in trace.terms.values())
    assert torch.isfinite(trace.log_weights).all()
    iwae = training_bound("iwae")(trace.log_weights)  # the trainer's objectives, both per example
    assert (iwae >= training_bound("elbo")(trace.log_weights) - 1e-5).all()
    (-trace.log_weights.mean() - iwae.mean()).backward()
    for name, parameter in [*model.named_parameters(), *heads.named_parameters()]:
        assert parameter.grad is None or torch.isfinite(parameter.grad).all(), name
    with torch.no_grad():
        log_weights = model(x, heads, 64, generator).log_weights
    assert (importance_weighted_log_likelihood(log_weights) >= bound(log_weights) - 1e-5).all()


def test_the_test_settings_name_only_what_configs_offers() -> None:
    assert set(TINY_MODEL) <= set(MODELS) and set(TINY_INFERENCE) | set(OBJECTIVES) <= set(FAMILIES)
    assert {"dlgm1", "dlgm2", "draw"} <= set(MODELS)  # the paper's models are found
    assert {"vae", "vgp", "planar_flow", "hvi"} <= set(FAMILIES)  # and its families


def test_every_config_choice_composes() -> None:
    for group in ("dataset", "model", "inference", "optim", "trainer", "eval"):
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            cfg = compose_config([f"{group}={path.stem}"])
            assert cfg[group] is not None, path


EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs_one_step(experiment: str, tmp_path: Path) -> None:
    cfg = compose_config([f"experiment={experiment}"])
    model_name, inference = cfg.model.name, cfg.inference.name
    overrides = [
        f"experiment={experiment}",
        "dataset=synthetic",
        "dataset.shape=[1,8,8]",
        "dataset.n_train=8",
        "dataset.n_valid=4",
        "dataset.n_test=4",
        "trainer.batch_size=4",
        "trainer.max_steps=1",
        "trainer.progress=false",
        "trainer.eval_at_epochs=[]",
        "eval.is_samples=2",
        "eval.subset=4",
        "eval.batch_size=4",
        "device=cpu",
        *TINY_MODEL.get(model_name, []),
        *TINY_INFERENCE.get(inference, []),
    ]
    # keys the experiment sets for its own dataset (MNIST's holdout) that synthetic data lacks
    synthetic_keys = set(OmegaConf.load(CONFIG_DIR / "dataset" / "synthetic.yaml"))
    extra = sorted(set(compose_config(overrides).dataset) - synthetic_keys)
    overrides += [f"~dataset.{key}" for key in extra]
    metrics = train(compose_config(overrides), tmp_path)
    assert metrics["status"] == "finished" and metrics["experiment"] == experiment
    assert metrics["steps"] == 1 and torch.isfinite(torch.tensor(metrics["test"]["nll"]))
    assert metrics["train_objective"] == cfg.trainer.objective
    assert metrics["train_samples"] == cfg.trainer.n_samples
