"""Keys and labels at commit: every key once (or the copy the config keeps), and the label
counts that training needs, from one read of those columns of every shard."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache.cache.records import ShardRecord
from raycache.cache.store import Store
from raycache.errors import RaycacheError

__all__ = ["MAX_COUNTED", "scan"]

MAX_COUNTED = 1_000_000
"""Label values counted per value in the manifest up to this (larger ids: min and max only)."""


def scan(store: Store, cache_dir: str, records: list[ShardRecord], key: str, duplicates: str,
         labels: list[str], name: str) -> tuple[list[ShardRecord], dict[str, Any]]:
    """(records, label stats). Duplicate keys: an error that lists a few (`duplicates`
    error), or the shards holding the other copies are written again without them (first or
    last: the copy kept, in source order), their records replaced."""
    from raycache.fill.shards import rewrite

    order = sorted(records, key=ShardRecord.order)
    if not order:
        return records, {}

    def read(r: ShardRecord) -> pa.Table:
        with store.fs.open(f"{cache_dir}/{r.path}", "rb") as f:
            return pq.read_table(f, columns=[key, *labels])

    with ThreadPoolExecutor(8) as pool:
        tables = list(pool.map(read, order))
    table = pa.concat_tables(tables).combine_chunks()
    shard = np.repeat(np.arange(len(order)), [t.num_rows for t in tables])
    row = np.concatenate([np.arange(t.num_rows) for t in tables])
    keep = _unique(table.column(key), duplicates, key, name)
    if not keep.all():
        records = [rewrite(store, cache_dir, r, row[shard == i][keep[shard == i]])
                   if not keep[shard == i].all() else r for i, r in enumerate(order)]
        table = table.filter(pa.array(keep))
    return records, {c: _stats(table.column(c)) for c in labels}


def _unique(keys: pa.ChunkedArray, policy: str, key: str, name: str) -> np.ndarray:
    """Which rows to keep: all when every key is unique."""
    n = len(keys)
    first = pc.index_in(keys, value_set=keys).to_numpy()  # each row's first copy
    if (first == np.arange(n)).all():
        return np.ones(n, bool)
    if policy == "error":
        counts = pa.table({"key": keys}).group_by("key").aggregate([("key", "count")])
        dups = counts.filter(pc.greater(counts.column("key_count"), 1))
        raise RaycacheError(
            f"fill of {name}: {dups.num_rows} key(s) of column {key!r} occur more than once, "
            f"e.g. {dups.column('key').to_pylist()[:5]}; no manifest was written. Make the keys "
            "unique (source.key names another column?), or set source.duplicates: first or last "
            "to keep one row per key"
        )
    if policy == "last":  # each row's last copy, by the first copy in reversed order
        backwards = keys.take(pa.array(np.arange(n)[::-1]))
        last = n - 1 - pc.index_in(keys, value_set=backwards).to_numpy()
        return last == np.arange(n)
    return first == np.arange(n)


def _stats(values: pa.ChunkedArray) -> dict[str, Any]:
    nulls = values.null_count
    low, high = pc.min(values).as_py(), pc.max(values).as_py()
    out: dict[str, Any] = {"nulls": nulls, "min": low, "max": high}
    if nulls == 0 and low is not None and low >= 0 and high < MAX_COUNTED:
        out["counts"] = np.bincount(values.to_numpy(), minlength=high + 1).tolist()
    return out
