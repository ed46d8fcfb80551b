"""MLflow (logger=mlflow, `pip install -e .[mlflow]`): the config as params, every scalar as a
metric at its step, the test result (metrics test/..., test_result.json) and the run's figures
as artifacts; by default into a local store in the run folder (mlflow/mlflow.db, artifacts in
mlflow/artifacts), or to any tracking server (logger.mlflow.tracking_uri)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vgp_bench.files import atomic_write_text
from vgp_bench.run.loggers.base import RunLogger
from vgp_bench.run.loggers.tensorboard import hparam_values

RUN_FILE = "mlflow_run.json"  # in the run folder: the MLflow run a resume continues
PARAM_LENGTH = 500  # MLflow's oldest limit on a param's value (newer servers take more)
BATCH_PARAMS, BATCH_METRICS = 100, 1000  # log_batch's limits per request
STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "preempted": "KILLED"}  # else FAILED


def local_store(run_dir: Path) -> str:
    """The default tracking URI: a SQLite store in the run folder's mlflow/."""
    (run_dir / "mlflow").mkdir(exist_ok=True)
    return f"sqlite:///{(run_dir / 'mlflow' / 'mlflow.db').resolve()}"


def param_values(config: dict[str, Any]) -> dict[str, str]:
    """The config's leaves as MLflow params (text, cut to PARAM_LENGTH characters)."""
    return {key: str(value)[:PARAM_LENGTH] for key, value in hparam_values(config).items()}


class MlflowLogger(RunLogger):
    """One MLflow run per run folder (a resumed run continues it, RUN_FILE); metrics are sent
    in batches at `flush`, so a step costs no request."""

    name = "mlflow"

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        tracking_uri: str | None = None,
        experiment_name: str = "vgp-bench",
        run_name: str | None = None,
        request_timeout: int = 10,
        request_retries: int = 1,
    ) -> None:
        # a server that is down costs a few seconds per request, not minutes of back-off
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(request_timeout))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(request_retries))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # not its database's set-up

        self.run_dir = run_dir
        self.tracking_uri = tracking_uri or local_store(run_dir)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        self.pending: list[Any] = []
        self.run_id = self.resumed_run() or self.new_run(experiment_name, run_name or run_dir.name)
        self.log_params(config)

    def experiment_id(self, name: str) -> str:
        """The experiment `name`, created if new (its artifacts in the run folder when the
        store is the local default)."""
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        location = None
        if self.tracking_uri.startswith("sqlite:///") and "mlflow" in self.tracking_uri:
            location = (self.run_dir / "mlflow" / "artifacts").resolve().as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except Exception:
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def resumed_run(self) -> str | None:
        """The MLflow run an earlier attempt of this run folder logged to, on this store."""
        try:
            saved = json.loads((self.run_dir / RUN_FILE).read_text())
        except (OSError, ValueError):
            return None
        if saved.get("tracking_uri") != self.tracking_uri:
            return None
        run_id = str(saved.get("run_id"))
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def new_run(self, experiment_name: str, run_name: str) -> str:
        run = self.client.create_run(
            self.experiment_id(experiment_name),
            run_name=run_name,
            tags={"vgp_bench.run_dir": str(self.run_dir.resolve())},
        )
        saved = {"tracking_uri": self.tracking_uri, "run_id": run.info.run_id}
        atomic_write_text(self.run_dir / RUN_FILE, json.dumps(saved, indent=2) + "\n")
        return run.info.run_id

    def log_params(self, config: dict[str, Any]) -> None:
        """The config's leaves not yet logged (a param once logged keeps its value)."""
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        params = [Param(k, v) for k, v in param_values(config).items() if k not in logged]
        for start in range(0, len(params), BATCH_PARAMS):
            self.client.log_batch(self.run_id, params=params[start : start + BATCH_PARAMS])

    def log_scalar(self, tag: str, value: float, step: int) -> None:
        from mlflow.entities import Metric

        self.pending.append(Metric(tag, float(value), int(time.time() * 1000), int(step)))

    def log_test_result(self, config: dict[str, Any], test: dict[str, Any], step: int) -> None:
        for name, value in test.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self.log_scalar(f"test/{name}", value, step)
        self.flush()
        self.client.log_dict(self.run_id, test, "test_result.json")

    def log_figures(self, paths: Sequence[Path]) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path), artifact_path="figures")

    def flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:BATCH_METRICS], self.pending[BATCH_METRICS:]
            try:
                self.client.log_batch(self.run_id, metrics=batch)
            except Exception:
                self.pending = batch + self.pending  # kept for the warning's count
                raise

    def close(self, status: str = "finished") -> None:
        self.flush()
        self.client.set_terminated(self.run_id, status=STATUS.get(status, "FAILED"))
