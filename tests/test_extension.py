"""A new family is one module and one config: added as a newcomer would add it, in a copy of
the checkout, it is tested by the contract suite, trained by vgp-train, reported by vgp-report,
listed and fitted by vgp-fit and the local gap with no other edit (vgp_bench/catalog.py,
docs/usage.md "Adding a family")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, TINY

NEWCOMER = "newcomer"
# The copy: the package, its configs and tests, and what makes the copy a checkout
COPIED = ("vgp_bench", "configs", "tests", "setup.cfg", "pyproject.toml")
# The contract tests that run once per family
CONTRACT_TESTS = ("test_contract.py", "test_families.py", "test_blackbox.py", "test_layout.py")


def checkout_with_a_newcomer(root: Path) -> Path:
    """A copy of the checkout with a new family: mean_field.py copied under a new name, and
    vae.yaml copied with that name and module: the two files a newcomer writes, nothing else."""
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        source, target = REPO / name, root / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignored)
        else:
            shutil.copy2(source, target)
    inference = root / "vgp_bench" / "inference"
    shutil.copy2(inference / "mean_field.py", inference / f"{NEWCOMER}.py")
    config = (root / "configs" / "inference" / "vae.yaml").read_text()
    config = re.sub(r"(?m)^name: vae$", f"name: {NEWCOMER}", config)
    config = config.replace("vgp_bench.inference.mean_field.", f"vgp_bench.inference.{NEWCOMER}.")
    assert f"name: {NEWCOMER}" in config and f"inference.{NEWCOMER}." in config
    (root / "configs" / "inference" / f"{NEWCOMER}.yaml").write_text(config)
    return root


def run_python(root: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`python ARGUMENTS` in the copy, importing the copy's vgp_bench."""
    environment = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
def test_a_new_family_is_tested_trained_and_reported_with_no_other_edit(tmp_path: Path) -> None:
    root = checkout_with_a_newcomer(tmp_path / "checkout")
    found = run_python(root, "-c", "import vgp_bench; print(vgp_bench.__file__)")
    assert Path(found.stdout.strip()).is_relative_to(root), found.stdout + found.stderr

    tests = [f"tests/{name}" for name in CONTRACT_TESTS]
    result = run_python(
        root, "-m", "pytest", "-v", "-p", "no:cacheprovider", *tests, "-k", NEWCOMER
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    for test in tests:  # each file runs its family tests for the newcomer, and they pass
        assert re.search(rf"(?m)^{test}::\S*{NEWCOMER}\S* PASSED", result.stdout), test

    train = "from vgp_bench.console_scripts import train; train()"
    shown = run_python(root, "-c", train, "--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert re.search(rf"(?m)^inference: .*\b{NEWCOMER}\b", shown.stdout), shown.stdout[-2000:]

    run_dir = tmp_path / "outputs" / NEWCOMER
    settings = [setting for setting in TINY if not setting.startswith("inference=")]
    trained = run_python(
        root, "-c", train, f"inference={NEWCOMER}", *settings, f"hydra.run.dir={run_dir}"
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (run_dir / "metrics.json").is_file()

    report = "import sys; from vgp_bench.analysis.report import main; sys.exit(main())"
    reported = run_python(root, "-c", report, str(run_dir))
    assert reported.returncode == 0, reported.stderr[-2000:]
    assert f"DLGM 1hl + {NEWCOMER.upper()}" in reported.stdout, reported.stdout[-2000:]

    fit = "from vgp_bench.console_scripts import fit; fit()"
    shown = run_python(root, "-c", fit, "--help")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert re.search(rf"(?m)^families=.*\b{NEWCOMER}\b", shown.stdout), shown.stdout[-2000:]
    fit_dir = tmp_path / "outputs" / "fit"
    quick = ["steps=3", "samples.per_step=4", "samples.bound=20", "samples.importance=20"]
    fitted = run_python(  # no head.<newcomer> in fit.yaml: its inference config alone
        root,
        "-c",
        fit,
        f"families=[mean_field,{NEWCOMER}]",
        *quick,
        "samples.plot=200",
        f"hydra.run.dir={fit_dir}",
    )
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    rows = json.loads((fit_dir / "fit.json").read_text())["families"]
    assert [row["family"] for row in rows] == ["mean_field", NEWCOMER]
    assert re.search(rf"(?m)^{NEWCOMER} ", fitted.stdout), fitted.stdout[-2000:]

    local_gap = "import sys; from vgp_bench.analysis.local_gap import main; sys.exit(main())"
    shown = run_python(root, "-c", local_gap, "--help")
    assert shown.returncode == 0 and NEWCOMER in shown.stdout, shown.stdout + shown.stderr
    gap_file = tmp_path / "local_gap.json"
    checkpoint = run_dir / "checkpoints" / "best.pt"
    arguments = ["--images=1", "--steps=3", "--is-samples=8", f"--out={gap_file}"]
    gaps = run_python(root, "-c", local_gap, str(checkpoint), "--families", NEWCOMER, *arguments)
    assert gaps.returncode == 0, gaps.stderr[-3000:]
    assert set(json.loads(gap_file.read_text())["summary"]) == {"amortized", NEWCOMER}
