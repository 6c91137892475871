"""What a probe method works on: one encoder's features and class ids, split into training
and validation rows by the key hash training uses, and what it hands back per setting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache._cache.committed import Cache
from raycache._heads.specs import HeadSpec

if TYPE_CHECKING:
    import torch

__all__ = ["Candidate", "Features"]


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
        return list(self.spec.class_names) or [str(i) for i in range(self.spec.num_classes)]


@dataclass
class Candidate:
    """One setting of a method's grid: its validation predictions, and where it is a head,
    the head (weights of `spec`, or a trained run's checkpoint folder)."""

    setting: dict[str, Any]
    pred: np.ndarray
    """Class ids predicted for Features.x_val, in its row order."""
    spec: HeadSpec | None = None
    weights: dict[str, torch.Tensor] | None = None
    checkpoint: str | None = None
    """A checkpoint folder (store URI) holding head.pt and head.json."""

    @property
    def is_head(self) -> bool:
        return self.checkpoint is not None or self.weights is not None
