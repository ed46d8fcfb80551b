"""logger=mlflow against a real tracking server: `mlflow server` on 127.0.0.1 (a free port, a
SQLite backend, artifacts served by the server), started and stopped here; a tiny vgp-train run
logs to it and MLflow's client reads the run back. Needs the extra (pip install -e .[mlflow]):
`make test-mlflow`, or `.ci/run`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, TINY

pytestmark = [pytest.mark.mlflow, pytest.mark.slow]
mlflow = pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install -e .[mlflow]")

SERVER_START_S = 120  # the server's first start creates its database
TRAIN_S = 300


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"mlflow server exited ({server.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"mlflow server not up in {SERVER_START_S} s: {log.read_text()[-2000:]}")


def stop(server: subprocess.Popen) -> None:
    """The server and its workers (its own process group), politely and then not."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=20)


@pytest.fixture
def tracking_server(tmp_path: Path) -> Iterator[str]:
    port, log = free_port(), tmp_path / "server.log"
    command = [
        sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
        "--artifacts-destination", str(tmp_path / "server_artifacts"), "--workers", "1",
    ]  # fmt: skip
    with log.open("w") as output:
        server = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, server, log)
        yield url
    finally:
        stop(server)


def vgp_train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [
        str(Path(sys.executable).parent / "vgp-train"), *TINY, "threads=1",
        f"hydra.run.dir={run_dir}", *overrides,
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=TRAIN_S, check=False
    )


def test_a_run_logged_to_a_tracking_server_reads_back_through_mlflows_client(
    tracking_server: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    result = vgp_train(
        run_dir,
        "logger=[tensorboard,mlflow]",
        f"logger.mlflow.tracking_uri={tracking_server}",
        "logger.mlflow.experiment_name=vgp-test",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "logger mlflow" not in result.stderr  # no sink failed
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert any((run_dir / "tensorboard").iterdir())  # the other sink too

    client = MlflowClient(tracking_uri=tracking_server)
    experiment = client.get_experiment_by_name("vgp-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    saved = json.loads((run_dir / "mlflow_run.json").read_text())
    assert saved == {"tracking_uri": tracking_server, "run_id": run.info.run_id}
    params = run.data.params
    assert params["trainer.epochs"] == "2" and params["inference._target_"].endswith(
        "MeanFieldHead"
    )
    assert params["dataset.n_train"] == "64" and params["seed"] == "0"
    # per-epoch metrics at their steps, as metrics.json's history has them
    history = client.get_metric_history(run.info.run_id, "valid/bound")
    assert [(m.step, m.value) for m in history] == [
        (entry["step"], entry["valid_bound"]) for entry in metrics["history"]
    ]
    assert len(client.get_metric_history(run.info.run_id, "train/bound")) >= 2
    # the test result, as metrics and as the whole record
    test = metrics["test"]
    assert run.data.metrics["test/nll"] == test["nll"]
    assert run.data.metrics["test/bound_nll"] == test["bound_nll"]
    result_file = client.download_artifacts(run.info.run_id, "test_result.json", str(tmp_path))
    recorded = json.loads(Path(result_file).read_text())
    assert recorded["nll"] == test["nll"] and recorded["is_samples"] == test["is_samples"]
    # the figures, as the run folder holds them
    figures = sorted(Path(f.path).name for f in client.list_artifacts(run.info.run_id, "figures"))
    assert figures == ["reconstructions.pdf", "reconstructions.png", "samples.pdf", "samples.png"]
    downloaded = client.download_artifacts(run.info.run_id, "figures/samples.pdf", str(tmp_path))
    assert Path(downloaded).read_bytes() == (run_dir / "samples.pdf").read_bytes()


def test_a_tracking_server_that_is_down_never_stops_training(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = vgp_train(
        run_dir,
        "logger=[csv,mlflow]",
        f"logger.mlflow.tracking_uri=http://127.0.0.1:{free_port()}",  # nothing listens
        "logger.mlflow.request_retries=0",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "logger mlflow" in line]
    assert len(said) == 1 and "could not start" in said[0]
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "finished"
    assert (run_dir / "metrics.csv").is_file() and (run_dir / "samples.pdf").is_file()
