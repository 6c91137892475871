"""Training objectives: a protocol, and a dict registry of families keyed by config `objective`."""

from raycache.objectives.base import Evaluator, Family, Objective
from raycache.objectives.classification import CLASSIFICATION
from raycache.objectives.groups import GROUPS
from raycache.objectives.pairs import PAIRS

REGISTRY: dict[str, Family] = {
    "classification": CLASSIFICATION,
    "groups": GROUPS,
    "pairs": PAIRS,
}

__all__ = ["REGISTRY", "Evaluator", "Family", "Objective"]
