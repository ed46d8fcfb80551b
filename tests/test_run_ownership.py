"""A run folder is only ever a run's, and a checkpoint belongs to its run (issue 57, rows 1-4
and 11), from vgp-train and vgp-eval alike; checkpoints of older code still resume at home."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers import compose_config
from tests.test_trust import QUICK, cli, error_lines, pre_start, snapshot
from vgp_bench.errors import RunFolderError
from vgp_bench.run.commands.eval_command import evaluate_checkpoint
from vgp_bench.run.commands.train import train
from vgp_bench.run.folder.checkpoint import load_checkpoint
from vgp_bench.run.folder.metrics import Evaluation

EVAL = OmegaConf.create({"is_samples": 2})


def evaluate(checkpoint: Path) -> Evaluation:
    return evaluate_checkpoint(str(checkpoint), EVAL, device_name="cpu")


def as_older_code(path: Path) -> None:
    """Rewrite the checkpoint at `path` as code older than checkpoint identities wrote it."""
    checkpoint = load_checkpoint(path)
    del checkpoint["run"]
    torch.save(checkpoint, path)


def test_a_folder_is_a_runs_only_when_its_metrics_json_says_so(tmp_path: Path) -> None:
    # row 1: a user's folder with a config.yaml is refused, nothing moved
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "config.yaml").write_text("lr: 0.1\n")
    (theirs / "notes.txt").write_text("my notes\n")
    (theirs / "samples.png").write_bytes(b"my picture")
    before = snapshot(theirs)
    with pytest.raises(RunFolderError, match=r"is not empty .* and holds no run") as error:
        train(compose_config(QUICK), theirs)
    assert "\n" not in str(error.value)
    result = cli("vgp-train", [*QUICK, f"hydra.run.dir={theirs}"], tmp_path)
    assert result.returncode == 1 and len(error_lines(result)) == 1, result.stderr
    assert snapshot(theirs) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["theirs"]  # no sibling
    # vgp-eval: a metrics.json that is no run's record is refused, never appended to
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    (theirs / "metrics.json").write_text(json.dumps({"accuracy": 0.9}))
    shutil.copy(run_dir / "checkpoints" / "last.pt", theirs / "model.pt")
    before = snapshot(theirs)
    for start in (
        lambda: evaluate(theirs / "model.pt"),
        lambda: train(compose_config(QUICK), theirs),
    ):
        with pytest.raises(RunFolderError, match=r"metrics\.json is not a run's record") as error:
            start()
        assert str(theirs / "metrics.json") in str(error.value)
    assert snapshot(theirs) == before


def test_a_folder_inside_a_run_folder_is_refused(tmp_path: Path, capsys) -> None:
    # row 2: hydra.run.dir=<run>/.hydra, or a new folder inside a run
    base = tmp_path / "base"
    train(compose_config(QUICK), base)
    before = snapshot(base)
    for inner in (base / ".hydra", base / "sub"):
        with pytest.raises(RunFolderError, match=rf"lies inside the run folder {base}"):
            train(compose_config(QUICK), inner)
        line = pre_start("vgp-train", QUICK, inner, capsys)  # before Hydra makes the folder
        assert line.startswith("vgp-train: error: ") and "lies inside the run folder" in line
    assert snapshot(base) == before and not (base / "sub").exists()
    # vgp-eval: a run copied inside another run's folder (older code allowed it) is refused
    shutil.copytree(base, tmp_path / "copy")
    shutil.move(tmp_path / "copy", base / "copy")
    before = snapshot(base)
    with pytest.raises(RunFolderError, match="lies inside the run folder"):
        evaluate(base / "copy" / "checkpoints" / "last.pt")
    assert snapshot(base) == before


def test_another_runs_checkpoint_is_neither_evaluated_nor_resumed(tmp_path: Path) -> None:
    # row 3: a VAE run's checkpoint copied as a planar flow run's best.pt
    vae, flow = tmp_path / "vae", tmp_path / "flow"
    train(compose_config(QUICK), vae)
    flow_settings = [*QUICK, "inference=planar_flow", "inference.flow_length=2"]
    train(compose_config(flow_settings), flow)
    shutil.copy(vae / "checkpoints" / "last.pt", flow / "checkpoints" / "best.pt")
    before = snapshot(flow)
    with pytest.raises(RunFolderError, match=r"best\.pt is not this run's checkpoint") as error:
        evaluate(flow)  # the run folder: its best.pt
    assert "dlgm1 + vae" in str(error.value) and "dlgm1 + planar_flow" in str(error.value)
    with pytest.raises(RunFolderError, match=r"best\.pt is not this run's checkpoint"):
        train(compose_config([*flow_settings, "trainer.max_steps=4"]), flow)  # would test it
    assert snapshot(flow) == before
    result = cli("vgp-eval", [f"checkpoint={flow}", "eval.is_samples=2", "device=cpu"], tmp_path)
    errors = [line for line in error_lines(result) if line.startswith("vgp-eval: error:")]
    assert result.returncode == 1 and len(errors) == 1, result.stderr
    assert "is not this run's checkpoint" in errors[0] and snapshot(flow) == before


@pytest.mark.parametrize("code", ["current", "older"])
def test_swapped_last_checkpoints_are_refused(tmp_path: Path, code: str) -> None:
    # row 4: seed 0's and seed 1's last.pt swapped; checkpoints of older code too
    runs = {seed: tmp_path / f"seed{seed}" for seed in (0, 1)}
    for seed, run_dir in runs.items():
        train(compose_config([*QUICK, f"seed={seed}"]), run_dir)
        if code == "older":
            as_older_code(run_dir / "checkpoints" / "last.pt")
    last = {seed: run_dir / "checkpoints" / "last.pt" for seed, run_dir in runs.items()}
    swapped = last[0].read_bytes()
    last[0].write_bytes(last[1].read_bytes())
    last[1].write_bytes(swapped)
    before = snapshot(runs[0])
    for seed in (0, 1):  # the folder's own settings, and those the foreign checkpoint has
        more = [*QUICK, f"seed={seed}", "trainer.max_steps=4"]
        with pytest.raises(RunFolderError, match=r"last\.pt is not this run's checkpoint"):
            train(compose_config(more), runs[0])
    with pytest.raises(RunFolderError, match=r"last\.pt is not this run's checkpoint"):
        evaluate(last[0])
    assert snapshot(runs[0]) == before


def test_a_checkpoint_of_older_code_resumes_and_is_evaluated_in_its_own_folder(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    train(compose_config(QUICK), run_dir)
    as_older_code(run_dir / "checkpoints" / "last.pt")
    evaluation = evaluate(run_dir / "checkpoints" / "last.pt")
    recorded = json.loads((run_dir / "metrics.json").read_text())["evaluations"]
    assert recorded[-1]["nll"] == evaluation.nll
    metrics = train(compose_config([*QUICK, "trainer.max_steps=4"]), run_dir)
    assert metrics["status"] == "finished" and metrics["steps"] == 4
    identity = load_checkpoint(run_dir / "checkpoints" / "last.pt")["run"]  # written anew
    assert identity["run_id"] == metrics["run_id"] and identity["inference"] == "vae"


def test_a_system_folder_is_refused_without_advice_that_destroys(tmp_path: Path) -> None:
    # row 11: hydra.run.dir=/ is someone's folder, whatever links it holds
    with pytest.raises(RunFolderError) as error:
        train(compose_config(QUICK), Path("/"))
    message = str(error.value)
    assert message.startswith("/ is not empty (") and "holds no run" in message
    assert "remove" not in message and "delete" not in message and "\n" not in message
