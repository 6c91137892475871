"""The rows an export writes: a version's key, labels and vectors, shard by shard, exactly the
rows `Cache.read_table` gives (a shared shard's kept rows only), vectors as
FixedSizeList<dtype>[dim]."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from raycache._cache.committed import Cache
from raycache._cache.native import DTYPES, as_dtype
from raycache._cache.reads import cache_label
from raycache._errors import ConfigError

__all__ = ["IN_FLIGHT", "Rows", "rows_of"]

IN_FLIGHT = 2
"""Shards read ahead of the writer: an export holds at most this many (plus the one being
written), whatever the cache's size."""


@dataclass(frozen=True)
class Rows:
    """What an export of one version writes, and its rows shard by shard."""

    cache: Cache
    """The version."""
    vectors: dict[str, int]
    """The encoders exported (their columns), with their dims."""
    dtype: str
    """The vectors' number type."""

    @property
    def label(self) -> str:
        """The version as "name/fingerprint"."""
        return cache_label(self.cache.dir)

    @property
    def key(self) -> str:
        """The key column."""
        return self.cache.manifest.key_column

    @property
    def labels(self) -> list[str]:
        """The label columns (the key apart)."""
        return [c for c in self.cache.manifest.label_columns if c != self.key]

    @property
    def rows(self) -> int:
        """The version's rows (its manifest's count)."""
        return self.cache.manifest.rows

    @property
    def columns(self) -> list[str]:
        """The columns exported, in order: key, labels, vectors."""
        return [self.key, *self.labels, *self.vectors]

    def tables(self) -> Iterator[pa.Table]:
        """The rows shard by shard (each checked against its sha256), `columns` only, vectors
        as FixedSizeList<dtype>[dim], every shard in the first one's schema (which names the
        version in its metadata)."""
        schema = None
        for table in self.cache.iter_tables(self.columns, True, IN_FLIGHT):
            table = as_dtype(table.select(self.columns), self.dtype)
            if schema is None:
                schema = table.schema.with_metadata({b"raycache.cache": self.label.encode()})
            yield table.cast(schema)


def rows_of(cache: Cache, encoders: list[str] | None, dtype: str) -> Rows:
    """The Rows of an export of `cache`: its encoders (or those named, checked), `dtype`
    checked; ConfigError naming every bad value and what the cache has."""
    have = {e.name: e.dim for e in cache.manifest.encoders}
    problems = [f"encoder {e!r} is not in cache {cache_label(cache.dir)}; it has {sorted(have)}"
                for e in encoders or [] if e not in have]
    if dtype not in DTYPES:
        problems.append(f"dtype={dtype!r} is not a number type vectors are exported in; "
                        f"expected one of {sorted(DTYPES)}")
    if problems:
        raise ConfigError(problems)
    return Rows(cache, {e: have[e] for e in encoders or have}, dtype)
