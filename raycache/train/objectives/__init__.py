"""Training objectives: a protocol, and a dict registry of families keyed by config `objective`."""

from raycache.train.objectives.base import Evaluator, Family, Objective
from raycache.train.objectives.classification import CLASSIFICATION
from raycache.train.objectives.groups import GROUPS
from raycache.train.objectives.pairs import PAIRS

OBJECTIVES: dict[str, Family] = {
    "classification": CLASSIFICATION,
    "groups": GROUPS,
    "pairs": PAIRS,
}

__all__ = ["OBJECTIVES", "Evaluator", "Family", "Objective"]
