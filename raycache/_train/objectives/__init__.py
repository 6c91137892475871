"""Training objectives: a protocol, and a dict registry of families keyed by config `objective`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache._train.objectives.base import EPOCH_METRICS, Evaluator, Family, Objective
from raycache._train.objectives.classification import CLASSIFICATION
from raycache._train.objectives.groups import GROUPS
from raycache._train.objectives.pairs import PAIRS

if TYPE_CHECKING:
    from raycache._train.config import TrainConfig

OBJECTIVES: dict[str, Family] = {
    "classification": CLASSIFICATION,
    "groups": GROUPS,
    "pairs": PAIRS,
}

__all__ = ["OBJECTIVES", "Evaluator", "Family", "Objective", "metric_problems"]


def metric_problems(cfg: TrainConfig) -> list[str]:
    """`evaluation.monitor` and `select` must name a metric the objective reports: checked
    when the config loads (train.driver.plan), before any work, not after the first epoch."""
    known = [*EPOCH_METRICS, *OBJECTIVES[cfg.objective].metrics(cfg)]
    return [f"{where}={name!r} is not a metric of objective {cfg.objective!r}; expected one "
            f"of {known}" for where, name in (("evaluation.monitor", cfg.evaluation.monitor),
                                              ("select", cfg.select))
            if name is not None and name != "auto" and name not in known]
