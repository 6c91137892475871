"""What a probe method works on: one encoder's features and class ids, split into training
and validation rows by the key hash training uses (in this process, or held in parts by Ray
workers), and what it hands back per setting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache._cache.committed import Cache
from raycache._heads.specs import HeadSpec

if TYPE_CHECKING:
    import torch

__all__ = ["Candidate", "Features", "Shared"]


@dataclass
class Features:
    """One encoder of one cache, split by key: float32 rows and int64 class ids."""

    encoder: str
    """How the table names it: the encoder's column, or CACHE/COLUMN when several caches."""
    cache: Cache
    spec: HeadSpec
    """A linear classifier's spec on this encoder alone (classes, names, encoder config)."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    train_config: dict[str, Any] = field(default_factory=dict)
    """The TrainConfig settings that name this cache, encoder, label and split."""

    @property
    def classes(self) -> list[str]:
        """Each class id's name: the label's names, else the ids as text."""
        return names(self.spec)

    @property
    def train_rows(self) -> int:
        return len(self.y_train)

    @property
    def val_rows(self) -> int:
        return len(self.y_val)


@dataclass
class Shared:
    """One encoder of one cache whose rows Ray workers hold, each its part (split by key as
    Features is): what the driver knows of them."""

    encoder: str
    """How the table names it (as Features.encoder)."""
    cache: Cache
    spec: HeadSpec
    """A linear classifier's spec on this encoder alone."""
    column: str
    """The embedding column the workers hold."""
    train_rows: int
    """Training rows of every part together."""
    val_rows: int
    """Validation rows of every part together."""
    workers: Any = field(default=None, repr=False)
    """The raycache._probe.on_ray.Workers that hold the parts."""

    @property
    def classes(self) -> list[str]:
        return names(self.spec)


def names(spec: HeadSpec) -> list[str]:
    """Each class id's name: the label's names, else the ids as text."""
    return list(spec.class_names) or [str(i) for i in range(spec.num_classes)]


@dataclass
class Candidate:
    """One setting of a method's grid: its validation predictions (or, where Ray workers scored
    their parts, the sum of their confusion counts), and where it is a head, the head (weights
    of `spec`, or a trained run's checkpoint folder)."""

    setting: dict[str, Any]
    """The setting, e.g. {"C": 0.3} or {"k": 20}."""
    pred: np.ndarray | None
    """Class ids predicted for Features.x_val, in its row order; None where `confusion` is
    given instead."""
    spec: HeadSpec | None = None
    """The head's spec, where the setting is a head (logreg, linear, mlp); None for knn."""
    weights: dict[str, torch.Tensor] | None = None
    """A head fitted in this process (logreg): its state_dict; None otherwise."""
    checkpoint: str | None = None
    """A checkpoint folder (store URI) holding head.pt and head.json."""
    confusion: np.ndarray | None = None
    """Confusion counts over the validation rows, summed over the Ray workers that scored
    them (the predictions stay there); None: computed from `pred`."""

    @property
    def is_head(self) -> bool:
        return self.checkpoint is not None or self.weights is not None
