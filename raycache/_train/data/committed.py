"""Training's source when the cache is committed, with the methods of a fill still under way
(raycache._train.data.overlap.OverlapFill), so the driver asks neither which it trains on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache._cache.committed import Cache
from raycache._cache.finding import open_cache
from raycache._cache.store import Store

if TYPE_CHECKING:
    from raycache._train.config import TrainConfig
    from raycache._train.runspec import WorkerSpec

__all__ = ["Committed"]


class Committed:
    """A committed cache, opened once (or as the caller opened it: the probe hands its on)."""

    overlap = ""
    """Its rows are all there: epoch 1 reads the cache whole, not shards as they land."""
    column = None
    """No source columns: the plan's checks read the cache's own."""

    def __init__(self, cfg: TrainConfig, store: Store, cache: Cache | None = None):
        self.cfg, self.store, self.opened = cfg, store, cache

    def cache(self) -> Cache:
        """The cache, opened on the first call."""
        if self.opened is None:
            self.opened = open_cache(self.cfg.cache, self.store, self.cfg.fingerprint)
        return self.opened

    def rows(self, key: str) -> int | None:
        """The rows training plans for: None, the manifest's."""
        return None

    def runspec(self, spec: WorkerSpec) -> WorkerSpec:
        """The run's spec as it is: nothing lands while it trains."""
        return spec

    def committed(self) -> Cache:
        """The cache the run trained on."""
        return self.cache()
