"""What the probe needs of training, handed in from above (raycache.probe hands in the training
driver's own functions): the probe imports nothing of raycache._train."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._cache.store import Store
    from raycache._heads.specs import HeadSpec

__all__ = ["Trained", "Training"]


class Trained(Protocol):
    """What the probe reads of a finished training run."""

    checkpoint: str
    """The selected member's checkpoint folder (store URI)."""
    best: dict[str, Any]
    """The selected member: its "settings" among others."""
    history: list[Any]
    """One entry per epoch run."""


@dataclass(frozen=True)
class Training:
    """Training's front door as the probe calls it; a train config is opaque here (a
    dataclass with `store` and `progress` fields)."""

    load_config: Callable[[dict[str, Any]], Any]
    """A train config from a dict of its settings, every problem in one ConfigError."""
    check: Callable[[Any, Store, Cache], tuple[Cache, HeadSpec, Any]]
    """The checks training runs of a config against a cache: (cache, head spec, class counts);
    a ConfigError naming what fails."""
    train_on: Callable[[Any, Cache], Trained]
    """A run of a loaded config on a cache the probe opened already."""
