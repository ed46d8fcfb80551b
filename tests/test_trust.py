"""Trust: nothing a user hands the runner can execute code or silently mix up a run folder."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, compose_config
from vgp_bench.checkpoint import load_checkpoint
from vgp_bench.train import train


class _RunsAShellCommand:
    """A pickle payload: unpickling it would run `touch <marker>`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def write_malicious_checkpoint(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        pickle.dump({"model": _RunsAShellCommand(marker)}, stream)
    # torch's own zip format with the same payload
    torch.save({"model": _RunsAShellCommand(marker)}, path.with_suffix(".zip.pt"))


@pytest.mark.parametrize("suffix", [".pt", ".zip.pt"])
def test_a_crafted_checkpoint_is_refused_without_running_code(tmp_path: Path, suffix: str) -> None:
    marker = tmp_path / "marker"
    write_malicious_checkpoint(tmp_path / "evil.pt", marker)
    with pytest.raises(ValueError, match="nothing in it was executed") as error:
        load_checkpoint(tmp_path / ("evil" + suffix))
    assert "evil" in str(error.value) and "\n" not in str(error.value)
    assert not marker.exists()


def test_a_crafted_last_checkpoint_is_refused_by_vgp_train(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    run_dir = tmp_path / "run"
    write_malicious_checkpoint(run_dir / "checkpoints" / "last.pt", marker)
    with pytest.raises(ValueError, match=r"last\.pt"):
        train(compose_config(TINY), run_dir)
    assert not marker.exists()


def test_a_real_checkpoint_loads_with_weights_only(tmp_path: Path) -> None:
    train(compose_config(TINY), tmp_path)
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert {"model", "heads", "optimizer", "generators", "state", "config"} <= checkpoint.keys()
