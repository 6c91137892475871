"""Reading a worker's part of a cache's rows: its pieces (shard, rows), each shard read whole and
checked, as a `Reading` (the cache's shards, their checks and kept rows) says; and its rows as
arrays: float32 features, labels as class ids."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._cache.entry_rows import reads_whole, selection
from raycache._cache.reads import kept_of, map_ordered, read_checked, read_unchecked
from raycache._cache.records import ShardEntry
from raycache._cache.store import Store
from raycache._errors import RaycacheError

if TYPE_CHECKING:
    from raycache._cache.committed import Cache

__all__ = ["Reading", "expected", "features", "keeps", "label_ids", "load_part", "pieces",
           "read_piece", "selected"]


@dataclass(frozen=True)
class Reading:
    """What a worker reads its part of a cache's rows by: the store, every shard (path, rows)
    in manifest order, their checks and the rows each version keeps of them. Training's
    WorkerSpec carries one (`WorkerSpec.reading`); the probe builds one with `of`."""

    store: Store
    """Where the shards are."""
    name: str
    """The cache as errors name it: `<cache>/<fingerprint>`."""
    shards: tuple[tuple[str, int], ...]
    """(path, rows) of every shard, in manifest order."""
    checks: tuple[tuple[int, str], ...] = ()
    """(bytes, sha256) of every shard, in `shards` order; empty: shards are read unchecked."""
    keeps: tuple[tuple[str, int], ...] = ()
    """(row selection, rows in the file) of every shard, in `shards` order (see `keeps`);
    empty: every shard is read whole."""

    @classmethod
    def of(cls, cache: Cache, store: Store | None = None, verify: bool = True) -> Reading:
        """A committed cache's reading: its shards, checked unless `verify` is false, read from
        `store` (the cache's own if None: a worker's copy, say)."""
        m = cache.manifest
        return cls(store or cache.store, f"{m.name}/{m.fingerprint}",
                   tuple((p, s.rows) for p, s in zip(cache.shard_paths(), m.shards, strict=True)),
                   tuple((s.bytes, s.sha256) for s in m.shards) if verify else (),
                   keeps(m.shards))

    @property
    def rows(self) -> int:
        """The rows of every shard."""
        return sum(rows for _, rows in self.shards)

    @functools.cached_property
    def selections(self) -> dict[str, tuple[str, int]]:
        """Shard path -> (row selection, rows in the file), for the shards read in part."""
        if not self.keeps:
            return {}
        return {path: keep for (path, _), keep in zip(self.shards, self.keeps, strict=True)
                if keep[0]}

    @functools.cached_property
    def rows_of(self) -> dict[str, int]:
        """Shard path -> the rows its entry says the version reads of it."""
        return dict(self.shards)


def keeps(shards: Sequence[ShardEntry]) -> tuple[tuple[str, int], ...]:
    """Reading.keeps of a manifest's shards: empty where every shard is read whole."""
    if all(map(reads_whole, shards)):
        return ()
    return tuple(selection(s) for s in shards)


def load_part(reading: Reading, columns: list[str], rank: int, world: int) -> pa.Table | None:
    """This worker's contiguous 1/world of the cache's rows, `columns` of them, read straight
    from the store (each shard whole and checked against the manifest when the reading carries
    checks), in parallel."""
    checks = expected(reading)
    tables = list(map_ordered(
        lambda p: read_piece(reading, p[0], columns, checks.get(p[0])).slice(p[1], p[2] - p[1]),
        pieces(reading, rank, world)))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def label_ids(column: pa.ChunkedArray | pa.Array, names: tuple[str, ...] = ()) -> np.ndarray:
    """A label column as int64 class ids: a named label's values by their place in `names`
    (the head's class names), an integer label as it is."""
    if not names:
        return column.to_numpy().astype(np.int64)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    ids = pc.index_in(column, value_set=pa.array(names, column.type))
    if ids.null_count:
        unknown = pc.filter(column, pc.is_null(ids)).unique().to_pylist()[:5]
        raise RaycacheError(f"label values {unknown} are not among the run's classes "
                            f"{list(names)[:10]}; the cache changed under the run: train again")
    return ids.to_numpy().astype(np.int64)


def features(batch: pa.Table, encoders: tuple[str, ...], keep: np.ndarray | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
    """The embedding columns, concatenated in order, as float32 rows (with `keep`, a boolean
    mask, only those rows): a read-only view of the Arrow buffer where one float32 column in
    one chunk allows it (callers copy what they keep), else one array filled chunk by chunk (one
    copy, however many shards the table holds, into `out` if given, else in Arrow's memory
    pool: a load of gigabytes reuses the pages of the one before instead of faulting in fresh
    ones)."""
    columns = [batch.column(name) for name in encoders]
    if out is None and keep is None and len(columns) == 1 and columns[0].num_chunks == 1 \
            and columns[0].type.value_type == pa.float32():
        col = columns[0].chunk(0)
        return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
    dims = [c.type.list_size for c in columns]
    rows = batch.num_rows if keep is None else int(np.count_nonzero(keep))
    x = out if out is not None else \
        np.frombuffer(pa.allocate_buffer(rows * sum(dims) * 4), np.float32).reshape(rows, sum(dims))
    lo = 0
    for col, dim in zip(columns, dims, strict=True):
        row = at = 0
        for chunk in col.chunks:
            flat = chunk.flatten().to_numpy(zero_copy_only=False).reshape(len(chunk), dim)
            if keep is None:
                x[row:row + len(chunk), lo:lo + dim] = flat
                row += len(chunk)
            else:
                part = keep[at:at + len(chunk)]
                n = int(np.count_nonzero(part))
                if flat.dtype == x.dtype and len(dims) == 1:  # one copy, straight in
                    np.compress(part, flat, axis=0, out=x[row:row + n])
                else:
                    x[row:row + n, lo:lo + dim] = flat[part]
                row += n
            at += len(chunk)
        lo += dim
    return x


def expected(reading: Reading) -> dict[str, tuple[int, str]]:
    """Each shard path's (bytes, sha256) from the manifest; empty where the run reads unchecked."""
    if not reading.checks:
        return {}
    return {path: check for (path, _), check in zip(reading.shards, reading.checks, strict=True)}


def read_piece(reading: Reading, path: str, columns: list[str],
               check: tuple[int, str] | None) -> pa.Table:
    """A shard read whole and checked against (bytes, sha256) (CorruptShard on a mismatch); with
    no check, only `columns`; either way only the rows its version keeps."""
    if check is not None:
        table = read_checked(reading.store, path, *check, reading.name, columns)
    else:
        table = read_unchecked(reading.store, path, columns, reading.name)
    return selected(reading, path, table)


def selected(reading: Reading, path: str, table: pa.Table) -> pa.Table:
    """A shard's rows that the cache's version keeps (a shard it shares in part with an older
    version: raycache._cache.selection), or all of them; a CorruptShard where the file holds
    another number of rows than its entry says."""
    keep = reading.selections.get(path)
    if not keep and path in reading.rows_of:  # a committed whole entry: its row count checked
        keep = ("", reading.rows_of[path])  # (a shard landing in a first pass has no entry yet)
    return kept_of(reading.store, path, reading.name, table, *keep) if keep else table


def pieces(reading: Reading, rank: int, world: int) -> list[tuple[str, int, int]]:
    """(shard path, first row, end row) of this worker's contiguous 1/world of the rows."""
    total = reading.rows
    lo, hi = total * rank // world, total * (rank + 1) // world
    out, start = [], 0
    for path, rows in reading.shards:
        end = start + rows
        if end > lo and start < hi:
            out.append((path, max(lo - start, 0), min(hi, end) - start))
        start = end
    return out
