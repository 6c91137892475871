"""Training errors that a restart cannot fix (bad data, a bad config, a diverged loss) fail a
DDP run at once: Ray Train's failure policy otherwise restarts the worker group max_failures
times on them, each time from the last checkpoint into the same error."""

from __future__ import annotations

from typing import Any

from ray.train.torch import TorchTrainer
from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision
from ray.train.v2.api.exceptions import TrainingFailedError, WorkerGroupError

from raycache._errors import (
    CacheNotFound,
    ConfigError,
    CorruptShard,
    DivergedError,
    EncoderError,
    FingerprintError,
    SourceError,
)

__all__ = ["DETERMINISTIC", "FailFast", "Trainer", "deterministic"]

DETERMINISTIC = (ConfigError, CorruptShard, CacheNotFound, DivergedError, EncoderError,
                 FingerprintError, SourceError)
"""What a restart repeats (a store that cannot be reached, a killed worker: those it may fix)."""


def deterministic(error: BaseException | None) -> bool:
    return isinstance(error, DETERMINISTIC)


class FailFast(DefaultFailurePolicy):
    """Ray Train's own policy, but a worker group that failed on a deterministic raycache
    error is not restarted."""

    def make_decision(self, training_failed_error: TrainingFailedError) -> FailureDecision:
        if isinstance(training_failed_error, WorkerGroupError) and any(
                deterministic(e) for e in training_failed_error.worker_failures.values()):
            return FailureDecision.RAISE
        return super().make_decision(training_failed_error)


class Trainer(TorchTrainer):
    """TorchTrainer whose controller runs the FailFast policy (Ray Train 2.60 builds its
    policy from FailureConfig alone, and hands it to the controller here)."""

    def _initialize_and_run_controller(self, **kwargs: Any) -> Any:
        kwargs["failure_policy"] = FailFast(self.run_config.failure_config)
        return super()._initialize_and_run_controller(**kwargs)
