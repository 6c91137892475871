"""The rows an export writes: a version's key, labels and vectors, shard by shard, exactly the
rows `Cache.read_table` gives (a shared shard's kept rows only), vectors as
FixedSizeList<dtype>[dim] (or Arrow's fixed-shape tensor, `tensor`); a trained head's vectors
(its output or penultimate layer) made from the encoders' as each shard is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raycache._cache.committed import Cache
from raycache._cache.native import DTYPES, as_dtype, matrix, tensors
from raycache._cache.reads import cache_label
from raycache._errors import ConfigError, RaycacheError

if TYPE_CHECKING:
    from raycache._heads.head import Head

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
    head: HeadVectors | None = None
    """A trained head whose vectors are written too (None: the encoders' alone)."""
    tensor: bool = False
    """Vectors as Arrow's fixed_shape_tensor extension type (Ray Data: a 2-D array)."""

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
        """The columns exported, in order: key, labels, vectors (the head's last)."""
        return [self.key, *self.labels, *self.vectors]

    @property
    def read(self) -> list[str]:
        """The cache's columns read: those exported, and the encoders the head reads."""
        extra = [e for e in self.head.encoders if e not in self.vectors] if self.head else []
        return [c for c in self.columns if c not in self.head_column] + extra

    @property
    def head_column(self) -> tuple[str, ...]:
        return (self.head.column,) if self.head else ()

    def tables(self) -> Iterator[pa.Table]:
        """The rows shard by shard (each checked against its sha256), `columns` only, vectors
        as FixedSizeList<dtype>[dim], every shard in the first one's schema (which names the
        version in its metadata)."""
        schema = None
        for table in self.cache.iter_tables(self.read, True, IN_FLIGHT):
            if self.head is not None:
                table = self.head.added(table)
            table = as_dtype(table.select(self.columns), self.dtype)
            if schema is None:
                schema = table.schema.with_metadata({b"raycache.cache": self.label.encode()})
            table = table.cast(schema)
            yield tensors(table) if self.tensor else table


@dataclass(frozen=True)
class HeadVectors:
    """A trained head's vectors of each row, from the encoders' the cache holds."""

    head: Head
    column: str
    """The column they are written to."""
    layer: str
    """"output" or "penultimate"."""

    @property
    def encoders(self) -> tuple[str, ...]:
        """The cache's encoder columns the head reads, in its order."""
        return self.head.spec.frozen

    def width(self) -> int:
        """The vectors' size (the layer run on one row of zeros)."""
        return int(self.head.embed_embeddings(np.zeros((1, self.head.spec.in_dim), np.float32),
                                              self.layer).shape[1])

    def added(self, table: pa.Table) -> pa.Table:
        """`table` with the head's vectors of its rows as a FixedSizeList<float32> column."""
        x = np.concatenate([matrix(table.column(e)) for e in self.encoders], axis=1)
        out = np.ascontiguousarray(self.head.embed_embeddings(x, self.layer), np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(out.ravel()), out.shape[1])
        return table.append_column(self.column, column)


def rows_of(cache: Cache, encoders: list[str] | None, dtype: str, head: Head | None = None,
            layer: str = "output", column: str = "head", tensor: bool = False) -> Rows:
    """The Rows of an export of `cache`: its encoders (or those named, checked; none but the
    head's vectors where a head is given), `dtype` checked, a head checked against the cache
    (its encoders there, of the weights it was trained on; its layer); ConfigError naming
    every bad value and what the cache has."""
    entries = {e.name: e for e in cache.manifest.encoders}
    have = {name: e.dim for name, e in entries.items()}
    problems = [f"encoder {e!r} is not in cache {cache_label(cache.dir)}; it has {sorted(have)}"
                for e in encoders or [] if e not in have]
    if dtype not in DTYPES:
        problems.append(f"dtype={dtype!r} is not a number type vectors are exported in; "
                        f"expected one of {sorted(DTYPES)}")
    vectors = {e: have[e] for e in (encoders or ([] if head else have)) if e in have}
    added = None
    if head is not None:
        problems += _head_problems(cache, head, column)
        added = HeadVectors(head, column, layer)
        if not problems:
            try:
                vectors[column] = added.width()
            except RaycacheError as exc:
                text = str(exc)
                problems.append(text if text.startswith("layer=") else f"layer={layer!r}: {text}")
    if problems:
        raise ConfigError(problems)
    return Rows(cache, vectors, dtype, added, tensor)


def _head_problems(cache: Cache, head: Head, column: str) -> list[str]:
    """What keeps `head` from embedding `cache`'s rows: it trains encoders (which need the
    raw inputs), an encoder missing from the cache or of other weights, a column taken."""
    label, spec = cache_label(cache.dir), head.spec
    entries = {e.name: e for e in cache.manifest.encoders}
    if spec.trainable:
        return [f"head: it trains encoders {list(spec.trainable)} with it, so its vectors "
                "need the raw inputs, not the cache's embeddings; embed them with "
                "Head.embed"]
    out = []
    for name in spec.frozen:
        entry = entries.get(name)
        want = spec.weights_digests.get(name)
        if entry is None:
            out.append(f"head: it reads encoder {name!r}, which cache {label} does not hold "
                       f"(it has {sorted(entries)}); export a cache filled with it")
        elif want and entry.weights_digest != want:
            out.append(f"head: it was trained on encoder {name!r} of weights {want[:12]}, but "
                       f"cache {label} holds weights {entry.weights_digest[:12]}; export the "
                       "cache it was trained on")
    taken = {cache.manifest.key_column, *cache.manifest.label_columns, *entries}
    if column in taken:
        out.append(f"head_column={column!r} is a column of cache {label}; name another")
    return out
