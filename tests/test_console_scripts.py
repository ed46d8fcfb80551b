"""Every console script of setup.cfg starts as installed (entry points find configs/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
