"""Data parallelism: two gloo ranks with half the batch each equal one process with it all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers import REPO, TINY
from vgp_bench.run.folder.checkpoint import load_checkpoint

COMMON = [
    *TINY,
    "trainer.max_steps=6",
    "trainer.epochs=10",
    "eval.is_samples=4",
    "trainer.image_every=0",
    "dataset.binarization=dynamic",
]


def run(command: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_gloo_ranks_match_one_process_with_the_full_batch(tmp_path: Path) -> None:
    run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "vgp_bench.run.commands.train",
            *COMMON,
            f"hydra.run.dir={tmp_path / 'ddp'}",
        ],
        tmp_path,
    )
    run(
        [
            sys.executable,
            "-m",
            "vgp_bench.run.commands.train",
            *COMMON,
            "trainer.micro_batches=2",
            f"hydra.run.dir={tmp_path / 'single'}",
        ],
        tmp_path,
    )
    ddp = load_checkpoint(tmp_path / "ddp" / "checkpoints" / "last.pt")
    single = load_checkpoint(tmp_path / "single" / "checkpoints" / "last.pt")
    assert ddp["state"]["step"] == single["state"]["step"] == 6
    for part in ("model", "heads"):
        for name, value in single[part].items():
            torch.testing.assert_close(ddp[part][name], value, rtol=1e-5, atol=1e-6)
    # both ranks' noise generators are in the checkpoint, in shard order
    assert len(ddp["generators"]) == 2
    assert all(torch.equal(a, b) for a, b in zip(ddp["generators"], single["generators"]))
    # only rank 0 wrote: one metrics file with the world size recorded
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["status"] == "finished"
    assert metrics["test"]["n_examples"] == 16  # the test set sharded, then gathered
