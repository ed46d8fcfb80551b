"""The package as users install it: the wheel carries configs/ (mapped into vgp_bench/configs
by setup.cfg) and every module, and, installed in a fresh environment, its console scripts and
`blackbox.fit()` run from a folder outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO, project_files
from vgp_bench.locations import group_options

SCRIPTS = ("vgp-train", "vgp-eval", "vgp-fit")  # the Hydra entry points: they read configs/


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built offline from a copy of the checkout (the checkout gets no build/ folder)."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    for name in project_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    dist = folder / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*command, "--no-index", "--quiet", "-w", str(dist), str(source)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = dist.glob("vgp_bench-*.whl")
    return built


def test_the_wheel_carries_every_config_and_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {path.relative_to(REPO).as_posix() for path in (REPO / "configs").rglob("*.yaml")}
    packaged = {name.removeprefix("vgp_bench/") for name in names if "/configs/" in name}
    assert packaged == configs
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "vgp_bench").rglob("*.py")}
    assert modules <= names


def fresh_environment(root: Path) -> Path:
    """A new venv that sees this environment's dependencies (torch, Hydra, ...) but neither
    the checkout nor its editable install; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # a path line of a .pth file adds the folder only: the editable install's own .pth there
    # is not processed, so vgp_bench is importable from the installed wheel alone
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "vgp_bench_test_dependencies.pth").write_text("\n".join(sorted(dependencies)))
    return python


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    python = fresh_environment(tmp_path / "venv")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    subprocess.run([*install, "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    environment["OMP_NUM_THREADS"] = "1"

    def run(*command: str) -> str:
        result = subprocess.run(
            command, cwd=elsewhere, env=environment, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{command}: {result.stderr[-3000:]}"
        return result.stdout

    helps = {script: run(str(python.parent / script), "--help") for script in SCRIPTS}
    for script, shown in helps.items():
        assert "== Configuration groups ==" in shown, (script, shown[-2000:])
    for group in ("dataset", "model", "inference"):  # listed from the wheel's own configs
        assert f"{group}: {', '.join(group_options(group))}" in helps["vgp-train"], group
    code = (
        "import vgp_bench, torch\n"
        "from vgp_bench import blackbox, locations\n"
        "from vgp_bench.run.process import runtime\n"
        "print(vgp_bench.__file__)\n"
        "print(locations.CONFIG_DIR)\n"
        "print(locations.checkout_root(), runtime.code_version())\n"
        "print(' '.join(blackbox.families()))\n"
        "fitted = blackbox.fit(lambda z: -0.5 * z.pow(2).sum(-1), 2, steps=3,\n"
        "                      samples_per_step=8)\n"
        "print(type(fitted).__name__)\n"
    )
    package, config_dir, provenance, families, fitted = run(str(python), "-c", code).splitlines()
    installed = Path(package).resolve().parent
    assert installed.is_relative_to((tmp_path / "venv").resolve()), package
    assert Path(config_dir) == installed / "configs"
    assert provenance == "None 0.1.0"
    assert families.split() == sorted([*group_options("inference"), "mean_field"])
    assert fitted == "FittedFamily"


def test_setup_cfg_names_every_package() -> None:
    """setup.cfg lists the packages by name (configs/ ships as vgp_bench.configs, which `find:`
    cannot name): every folder with an __init__.py, and no other."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    listed = set(parser["options"]["packages"].split())
    folders = {
        ".".join(path.parent.relative_to(REPO).parts)
        for root in ("vgp_bench", "hydra_plugins")
        for path in (REPO / root).rglob("__init__.py")
    }
    assert listed == {*folders, "vgp_bench.configs"}, "add or remove them in setup.cfg's packages"
