"""Every console script of setup.cfg starts as installed (entry points find configs/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgp_bench.run.config.declarations import Fit

SCRIPTS = ["vgp-train", "vgp-eval", "vgp-fit", "vgp-data", "vgp-report"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_console_script_starts(name: str, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / name
    if not script.exists():
        pytest.skip(f"{name} is not installed in this environment (run make setup)")
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [str(script), "--help"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip(), name


def test_help_loads_no_torch_and_lists_only_the_commands_groups(tmp_path: Path) -> None:
    program = (
        "import sys; sys.argv = ['vgp-train', '--help']\n"
        "from vgp_bench.console_scripts import train\n"
        "try:\n    train()\nexcept SystemExit:\n    pass\n"
        "print('torch loaded' if 'torch' in sys.modules else 'no torch')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("no torch")  # --help answers in about a second
    groups = result.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    listed = {line.split(":")[0] for line in groups.splitlines() if ": " in line}
    configs = Path(__file__).resolve().parent.parent / "configs"
    for group in listed:  # the template names every option of each group, no more
        options = sorted(path.stem for path in (configs / group).glob("*.yaml"))
        assert f"{group}: {', '.join(options)}" in groups, group
    assert listed == {
        "dataset", "eval", "experiment", "inference", "logger", "model", "optim", "trainer"
    }  # fmt: skip


def test_fit_help_lists_the_targets_and_every_family(tmp_path: Path) -> None:
    program = (
        "import sys; sys.argv = ['vgp-fit', '--help']\n"
        "from vgp_bench.console_scripts import fit\n"
        "try:\n    fit()\nexcept SystemExit:\n    pass\n"
        "print('torch loaded' if 'torch' in sys.modules else 'no torch')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("no torch")
    configs = Path(__file__).resolve().parent.parent / "configs"
    targets = sorted(path.stem for path in (configs / "target").glob("*.yaml"))
    assert f"\ntarget: {', '.join(targets)}\n" in result.stdout
    families = result.stdout.split("== Families ==")[1].split("== Config ==")[0]
    inference = sorted(path.stem for path in (configs / "inference").glob("*.yaml"))
    assert f"families=[...]: any of {', '.join(inference)} " in families  # every file, and
    assert "mean_field (vae)" in families  # the VAE's name in vgp-fit
    default = Fit().families  # declared with vgp-fit's keys (fit.yaml no longer repeats it)
    assert f"default {default}" in families


def test_two_hydra_modes_are_one_line_not_a_traceback(tmp_path: Path) -> None:
    from vgp_bench.console_scripts import modes_named

    assert modes_named(["-m", "--cfg", "job", "seed=0,1"]) == ["--multirun", "--cfg"]
    assert modes_named(["--cfg=job", "-c", "hydra", "--help"]) == ["--cfg"]
    script = Path(sys.executable).parent / "vgp-train"
    if not script.exists():
        pytest.skip("vgp-train is not installed in this environment (run make setup)")
    result = subprocess.run(
        [str(script), "-m", "--cfg", "job", "seed=0,1"],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and not result.stdout
    assert result.stderr.splitlines() == [
        "vgp-train: error: --multirun and --cfg cannot go together: name one of --run, "
        "--multirun, --cfg, --info and --shell-completion"
    ]
    assert not any(tmp_path.iterdir())
