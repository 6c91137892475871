"""The `mlflow` tracker: each epoch's metrics logged to an MLflow run as it ends (the settings of
Ray's `ray.air.integrations.mlflow.MLflowLoggerCallback`: tracking_uri, experiment_name,
tags), through MLflow's client (no global active run)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from raycache._train.tracking.hook import RunContext, TrainCallback, scalars

__all__ = ["MLflowSettings", "MLflowTracker"]


@dataclass(frozen=True)
class MLflowSettings:
    """tracking: [{kind: mlflow, ...}]: where the run goes."""

    tracking_uri: str | None = None
    """An MLflow tracking URI (http://..., file:/path, databricks); None: MLflow's own default
    ($MLFLOW_TRACKING_URI, else ./mlruns)."""
    experiment_name: str | None = None
    """The experiment (created when missing); None: the cache's name."""
    run_name: str | None = None
    """The MLflow run's name; None: raycache's run name."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags of the MLflow run (beside raycache.run and raycache.cache)."""


class MLflowTracker(TrainCallback):
    """Params at the start, metrics per epoch (step: the epoch), FINISHED or FAILED at the end."""

    settings = MLflowSettings

    def __init__(self, **settings: Any) -> None:
        self.s = MLflowSettings(**settings)
        self.client: Any = None
        self.run_id = ""

    def before_run(self, run_context: RunContext) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.s.tracking_uri)
        name = self.s.experiment_name or run_context.cache
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tags = {"raycache.run": run_context.run_name, "raycache.cache": run_context.cache,
                **self.s.tags}
        run = self.client.create_run(experiment, run_name=self.s.run_name or
                                     run_context.run_name, tags=tags)
        self.run_id = run.info.run_id
        self.client.log_batch(self.run_id, params=[
            Param(k, str(v)[:6000]) for k, v in run_context.config.items()],
            tags=[RunTag("raycache.run_dir", run_context.run_dir)])

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: str | None) -> None:
        from mlflow.entities import Metric

        m, now = metrics[0], int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[
            Metric(k, v, now, int(m["epoch"])) for k, v in scalars(m).items()])

    def after_exception(self, run_context: RunContext, error: BaseException) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, "FAILED")

    def after_run(self, run_context: RunContext, history: list[dict[str, Any]]) -> None:
        self.client.set_terminated(self.run_id, "FINISHED")
