"""Bad settings leave nothing behind (issue 57, rows 5-7 and 13): every value is checked before
a folder exists, in one line naming the key, the value and what is allowed; a start that ends
before writing anything leaves no folder; vgp-eval refuses keys no config defines; vgp-data
checks its folder before downloading, and missing data names the folder used."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers import CONFIG_DIR, compose_config
from tests.test_trust import QUICK, cli, error_lines, pre_start
from vgp_bench.data import mnist_convert
from vgp_bench.errors import ConfigError
from vgp_bench.run.commands.train import train
from vgp_bench.run.config import prestart
from vgp_bench.run.config.option_schema import OPTION_KEYS
from vgp_bench.run.config.settings import check_settings

VGP = ["inference=vgp", "inference.variational_data_size=8"]


POSITIVE, INTEGER = "a positive number", "an integer"
# (override, value shown, what is allowed); the VGP's keys under inference=vgp
BAD_VALUES = [
    ("inference.variational_data_size=-3", "-3", f"{INTEGER} >= 1"),
    ("inference.outputs_rank=0", "0", f"{INTEGER} >= 1"),
    ("inference.aux_samples=-1", "-1", f"{INTEGER} >= 0"),
    ("optim.optimizer.lr=-1", "-1", POSITIVE),
    ("model.latent_dims=[0]", "[0]", "a non-empty list of integers >= 1"),
    ("model.activation=nope", "'nope'", "tanh or relu or elu"),
    ("inference.kernel_variance=-1", "-1", POSITIVE),
    ("inference.noise_ratio=0", "0", POSITIVE),
    ("inference.warp=foo", "'foo'", "gp or linear"),
    ("optim.schedule.time_scale=0", "0", POSITIVE),
    # row 6: once a failed run, a crash after training, and 0-step epochs "finished"
    ("inference.jitter=-1", "-1", POSITIVE),
    ("dataset.n_test=0", "0", f"{INTEGER} >= 1"),
    ("dataset.n_train=0", "0", f"{INTEGER} >= 1"),
]


@pytest.mark.parametrize(("override", "value", "allowed"), BAD_VALUES)
def test_every_value_is_checked_before_any_folder_exists(
    tmp_path: Path, capsys, override: str, value: str, allowed: str
) -> None:
    run_dir = tmp_path / "new" / "run"
    overrides = [*QUICK, *(VGP if override.startswith("inference.") else []), override]
    line = f"{override.split('=')[0]} must be {allowed}, got {value}"
    assert pre_start("vgp-train", overrides, run_dir, capsys) == f"vgp-train: error: {line}"
    with pytest.raises(ConfigError) as error:  # and train() itself, as torchrun calls it
        train(compose_config(overrides), run_dir)
    assert str(error.value) == line
    assert not (tmp_path / "new").exists()


def test_a_missing_or_damaged_data_file_is_one_line_before_any_folder(
    tmp_path: Path, capsys
) -> None:
    run_dir = tmp_path / "run"
    data = tmp_path / "elsewhere"
    mnist = ["dataset=mnist", f"data_dir={data}", "device=cpu"]
    line = pre_start("vgp-train", mnist, run_dir, capsys)
    assert line.endswith(f"not found: run `vgp-data mnist --data-dir {data}`")  # row 13
    data.mkdir()
    (data / "mnist.h5").write_bytes(b"not an HDF5 file")
    line = pre_start("vgp-train", mnist, run_dir, capsys)
    assert line.startswith(f"vgp-train: error: {data / 'mnist.h5'} cannot be read")
    assert "vgp-data mnist --force" in line and not run_dir.exists()


def test_a_start_that_wrote_nothing_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    # a Ctrl-C (or any failure) after Hydra made the folder and before the run wrote to it
    at_exit = []
    monkeypatch.setattr(prestart.atexit, "register", lambda f, *a: at_exit.append((f, a)))
    run_dir = tmp_path / "day" / "run"
    assert pre_start("vgp-train", QUICK, run_dir, capsys) == ""
    run_dir.mkdir(parents=True)  # as Hydra does next
    for function, arguments in at_exit:  # the process exits
        function(*arguments)
    assert list(tmp_path.iterdir()) == []
    # a folder the run wrote into stays, and so does one that existed before
    at_exit.clear()
    assert pre_start("vgp-train", QUICK, run_dir, capsys) == ""
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text("{}")
    for function, arguments in at_exit:
        function(*arguments)
    assert (run_dir / "metrics.json").exists()


def test_every_option_rule_accepts_every_value_the_configs_give() -> None:
    seen: set[str] = set()
    for group in ("model", "inference", "optim", "dataset"):
        for path in sorted((CONFIG_DIR / group).rglob("*.yaml")):  # vgp_form/ too
            cfg = OmegaConf.create({group: OmegaConf.load(path)})
            check_settings(cfg, OPTION_KEYS)
            seen |= {key.name for key in OPTION_KEYS if OmegaConf.select(cfg, key.name) is not None}
    null_by_default = {
        "inference.latent_input_dim",
        "inference.kernel_inverse_lengthscale",
        "dataset.dilation",
    }
    assert {key.name for key in OPTION_KEYS} - null_by_default <= seen  # no rule goes unused


def test_the_option_rules_name_what_the_parts_accept() -> None:
    from vgp_bench.distributions import SCALE_LINKS
    from vgp_bench.inference import vgp
    from vgp_bench.models.dlgm import OUTPUT_BIAS_STARTS
    from vgp_bench.nets import ACTIVATIONS, INITIALIZATIONS
    from vgp_bench.run.config import option_schema

    assert tuple(ACTIVATIONS) == option_schema.ACTIVATIONS
    assert option_schema.INITIALIZATIONS == INITIALIZATIONS
    assert option_schema.SCALE_LINKS == SCALE_LINKS
    assert option_schema.OUTPUT_BIAS_STARTS == OUTPUT_BIAS_STARTS
    registries = {
        "inputs": vgp.VARIATIONAL_INPUTS,
        "outputs": vgp.VARIATIONAL_OUTPUTS,
        "prior_mean": vgp.PRIOR_MEANS,
        "mean_field_scale": vgp.MEAN_FIELD_SCALES,
        "objective": vgp.OBJECTIVES,
        "warp": vgp.WARPS,
        "aux_correction": vgp.AUX_CORRECTIONS,
        "paper_auxiliary": vgp.PAPER_AUXILIARIES,
    }
    for name, registry in registries.items():
        assert set(option_schema.VGP_CHOICES[name]) == set(registry), name


def test_vgp_eval_refuses_a_key_no_config_defines(tmp_path: Path) -> None:
    # row 7: `+eval.is_sample=20` was ignored and the run evaluated at S = 500
    result = cli("vgp-eval", [f"checkpoint={tmp_path}", "+eval.is_sample=20"], tmp_path)
    assert result.returncode == 1
    (line,) = [line for line in error_lines(result) if "error" in line]
    assert line.startswith("vgp-eval: error: +eval.is_sample: no such setting (did you mean")
    assert "eval.is_samples" in line
    from vgp_bench.run.config.settings import check_added_keys, eval_command_keys

    with pytest.raises(ConfigError, match=r"\+foo: no such setting; vgp-eval takes only"):
        check_added_keys(["+foo=bar"], None, eval_command_keys(), "vgp-eval")
    check_added_keys(["+eval.is_samples=20", "device=cpu"], None, eval_command_keys(), "vgp-eval")


def test_vgp_data_checks_its_folder_before_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # row 13: a read-only data folder (root writes anywhere: the check itself is what counts)
    real_access = os.access
    monkeypatch.setattr(
        "vgp_bench.files.os.access",
        lambda path, mode: real_access(path, mode) and Path(path) != tmp_path,
    )
    fetched = []
    monkeypatch.setattr(mnist_convert, "download_pickle", lambda *a: fetched.append(a))
    parser = argparse.ArgumentParser()
    mnist_convert.add_arguments(parser)
    args = parser.parse_args(["--data-dir", str(tmp_path), "--force"])
    with pytest.raises(ConfigError) as error:
        mnist_convert.run(args)
    assert str(error.value) == (
        f"cannot write {tmp_path / 'mnist.h5'}: {tmp_path} is read-only; pass --data-dir (or "
        "--out) for a writable place"
    )
    assert fetched == [] and list(tmp_path.iterdir()) == []
