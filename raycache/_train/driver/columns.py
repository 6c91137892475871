"""The cache's columns as the driver's plan reads them: each at most once per plan, from the
committed shards (unchecked: the workers check what they read) or from a fill under way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raycache._cache.committed import Cache

__all__ = ["Columns"]


class Columns:
    """Reads a column of `cache` by name the first time it is asked for, and keeps it for the
    plan's other checks; `source` reads it elsewhere (a fill under way, whose manifest lists no
    shards yet)."""

    def __init__(self, cache: Cache, source: Callable[[str], Any] | None = None):
        self.cache, self.source = cache, source
        self._read: dict[str, Any] = {}

    @property
    def rows(self) -> int:
        """The cache's rows: its manifest's, or, for a fill under way, its source's key column's."""
        if self.source is None:
            return self.cache.manifest.rows
        return len(self(self.cache.manifest.key_column))

    def __call__(self, name: str) -> Any:
        """The column `name`, every row, as an Arrow array."""
        if name not in self._read:
            self._read[name] = (self.source(name) if self.source is not None else
                                self.cache.read_table([name], verify=False).column(name))
        return self._read[name]
