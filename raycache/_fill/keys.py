"""Keys and labels at commit: every key once (or the copy the config keeps), and the label
counts that training needs, from one read of those columns of every shard: on the driver for
fills up to DRIVER_ROWS rows, on the cluster (Ray Data's hash-partitioned group-by) above that,
so the driver never holds a large fill's keys."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.labels import MAX_NAMED, named
from raycache._cache.records import ShardRecord
from raycache._cache.store import Store
from raycache._errors import RaycacheError, SourceError
from raycache._fill.summary import KeySummary, read_summary, summarize, value_counts

__all__ = ["DRIVER_ROWS", "MAX_COUNTED", "MAX_NAMED", "SUMMARY_ROWS", "counts_of",
           "label_problems", "label_stats", "named", "scan", "stats_of"]

MAX_COUNTED = 1_000_000
"""Label values counted per value in the manifest up to this (larger ids: min and max only)."""
DRIVER_ROWS = 2_000_000
"""A fill that ran on Ray with more rows than this scans its keys on the cluster; below it the
driver reads them (at most a few tens of MB), which is faster than a distributed group-by."""
SUMMARY_ROWS = 50_000_000
"""Up to this many rows, the writers' summaries are merged on the driver (8 bytes a row, for
a moment); above it the keys are read again on the cluster."""
SHARD = "__shard"
ROW = "__row"
EXAMPLES = 5


def scan(store: Store, cache_dir: str, records: list[ShardRecord], key: str, duplicates: str,
         labels: list[str], name: str, *, cluster: bool = False, raw: bool = False,
         summaries: dict[str, KeySummary] | None = None
         ) -> tuple[list[ShardRecord], dict[str, Any]]:
    """(records, label stats). Duplicate keys: an error that lists a few (`duplicates`
    error), or the shards holding the other copies are written again without them (first or
    last: the copy kept, in source order), their records replaced. With `summaries` (by shard
    path: what the writers summed up, raycache._fill.summary) and up to SUMMARY_ROWS rows,
    they are merged, a resumed shard's read from the store, and keys are read only from shards
    whose hashes collide or that have none; else, with `cluster` (a fill that ran on Ray) and
    more than DRIVER_ROWS rows, the work runs in Ray Data tasks. With `raw`, the label counts
    per value (Counters) instead of their stats."""
    from raycache._fill.shards import rewrite

    order = sorted(records, key=ShardRecord.order)
    if not order:
        return records, {}
    paths = [f"{cache_dir}/{r.path}" for r in order]
    rows = sum(r.rows for r in order)
    big = cluster and rows > DRIVER_ROWS
    try:
        if summaries is not None and rows <= SUMMARY_ROWS:
            found = _summed(store, cache_dir, order, key, labels, summaries)
        else:
            found = (_on_cluster if big else _here)(store, paths, key, labels)
        dups, counts, nulls = found
    except _Mixed as exc:  # types that differ past the rows the plan's check read
        a, b = order[exc.a], order[exc.b]
        raise SourceError(
            f"source column {exc.column!r} was read as {exc.types[0]} from {a.source!r} but as "
            f"{exc.types[1]} from {b.source!r} (past the first rows of each file, which the "
            "plan checked); no manifest was written. Give the column one type in every file "
            "and row of the source (e.g. 1.0 or 1 throughout), then fill again"
        ) from exc
    if nulls.num_rows:
        first = nulls.sort_by([(SHARD, "ascending"), (ROW, "ascending")])
        uri, row = _source_row(order[first.column(SHARD)[0].as_py()], first.column(ROW)[0].as_py())
        raise SourceError(
            f"fill of {name}: {nulls.num_rows} row(s) have no key (null in column {key!r}), "
            f"the first in {uri!r} at row {row}; no manifest was written. Every row needs a "
            "key: fill in the missing keys, or name a column that has one in every row as "
            "source.key"
        )
    done = (lambda: {c: Counter(counts[c]) for c in labels}) if raw else \
        (lambda: {c: _stats(counts[c]) for c in labels})
    if dups.num_rows == 0:
        return records, done()
    drop = _dropped(dups, key, duplicates, name)
    for c in labels:  # the dropped copies leave the label counts too
        for value in dups.column(c).filter(pa.array(drop)).to_pylist():
            counts[c][value] -= 1
    shard = dups.column(SHARD).to_numpy()[drop]
    row = dups.column(ROW).to_numpy()[drop]
    out = []
    for i, r in enumerate(order):
        gone = row[shard == i]
        if len(gone):
            r = rewrite(store, cache_dir, r, np.setdiff1d(np.arange(r.rows), gone))
        out.append(r)
    return out, done()


def read_keys(store: Store, path: str, index: int, key: str, labels: list[str]) -> pa.Table:
    """One shard's key and label columns, with its index and each row's position."""
    with store.fs.open(path, "rb") as f:
        table = pq.read_table(f, columns=[key, *labels])
    return table.append_column(SHARD, pa.array(np.full(table.num_rows, index, np.int32))) \
        .append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int32)))


def _here(store: Store, paths: list[str], key: str, labels: list[str]
          ) -> tuple[pa.Table, dict[str, dict[Any, int]], pa.Table]:
    """(rows whose key occurs more than once, each label column's count per value, rows whose
    key is null), read on this process."""
    with ThreadPoolExecutor(8) as pool:
        tables = list(pool.map(lambda i: read_keys(store, paths[i], i, key, labels),
                               range(len(paths))))
    _check_types(tables)
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    keys = table.column(key)
    first = pc.index_in(keys, value_set=keys).to_numpy()
    seen = np.bincount(first, minlength=len(first))
    dup = seen[first] > 1
    return (table.filter(pa.array(dup)), {c: value_counts(table.column(c)) for c in labels},
            _null_rows(table, key))


def _summed(store: Store, cache_dir: str, order: list[ShardRecord], key: str,
            labels: list[str], given: dict[str, KeySummary]
            ) -> tuple[pa.Table, dict[str, dict[Any, int]], pa.Table]:
    """The same from the shards' summaries (given, else stored, else made from the shard's
    keys): only the rows of shards whose key hashes collide are read, and the duplicates
    among them found by value."""
    paths = [f"{cache_dir}/{r.path}" for r in order]

    def one(i: int) -> KeySummary:
        r = order[i]
        found = given.get(r.path)
        if found is None or not found.matches(r):
            found = read_summary(store, cache_dir, r)
        return found if found is not None else summarize(
            read_keys(store, paths[i], i, key, labels), key, labels, r.path, r.sha256)

    with ThreadPoolExecutor(8) as pool:
        summaries = list(pool.map(one, range(len(order))))
    seen: dict[str, tuple[str, int]] = {}
    for i, s in enumerate(summaries):  # the first shard whose column differs in type
        for column, t in s.types.items():
            first, j = seen.setdefault(column, (t, i))
            if first != t:
                raise _Mixed(column, (first, t), j, i)
    counts: dict[str, Counter] = {c: Counter() for c in labels}
    for s in summaries:
        for c in labels:
            counts[c].update(s.counts.get(c, {}))
    nulls = pa.table({SHARD: pa.array([i for i, s in enumerate(summaries) for _ in s.nulls],
                                      pa.int32()),
                      ROW: pa.array([r for s in summaries for r in s.nulls], pa.int32())})
    hashes = np.concatenate([s.hashes for s in summaries])
    ordered = np.sort(hashes)
    twice = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    tables = []
    for i, s in enumerate(summaries):  # the shards holding a colliding hash: read by value
        hit = np.isin(s.hashes, twice)
        if twice.size and hit.any():
            tables.append(read_keys(store, paths[i], i, key, labels).filter(pa.array(hit)))
    if not tables:
        return pa.table({key: pa.array([], pa.null()), SHARD: pa.array([], pa.int32()),
                         ROW: pa.array([], pa.int32())}), counts, nulls
    table = pa.concat_tables(tables, promote_options="default").combine_chunks()
    keys = table.column(key)
    first = pc.index_in(keys, value_set=keys).to_numpy()
    return table.filter(pa.array(np.bincount(first, minlength=len(first))[first] > 1)), \
        counts, nulls


def _on_cluster(store: Store, paths: list[str], key: str, labels: list[str]
                ) -> tuple[pa.Table, dict[str, dict[Any, int]], pa.Table]:
    """The same on the cluster: keys counted by Ray Data's hash-partitioned group-by; only the
    rows of duplicate keys, and one count per label value, come back to the driver."""
    import ray.data

    blocks = max(1, min(len(paths) // 16, 1000))
    # as many partitions as blocks read, up to Ray Data's default: a small fill's group-bys
    # start one aggregator actor each, not two a CPU
    parts = min(blocks, ray.data.DataContext.get_current().default_hash_shuffle_parallelism)
    items = ray.data.from_items([{"i": i} for i in range(len(paths))],
                                override_num_blocks=blocks)
    ds = items.map_batches(_read_batch, fn_kwargs=dict(store=store, paths=paths, key=key,
                                                        labels=labels),
                           batch_format="pyarrow", batch_size=16).materialize()
    counts = ds.groupby(key, num_partitions=parts).count()
    repeated = counts.map_batches(_repeated, batch_format="pyarrow").take_all()
    dups = pa.table({key: pa.array([r[key] for r in repeated],
                                    ds.schema().base_schema.field(key).type)})
    rows = (ds.map_batches(_members, fn_kwargs=dict(key=key, keys=dups.column(key)),
                           batch_format="pyarrow").to_arrow_refs() if dups.num_rows else [])
    import ray

    table = pa.concat_tables(ray.get(rows)) if rows else \
        pa.table({key: dups.column(key), SHARD: pa.array([], pa.int32()),
                  ROW: pa.array([], pa.int32())})
    counts = {c: {r[c]: r["count()"]
                  for r in ds.groupby(c, num_partitions=parts).count().take_all()}
              for c in labels}
    nulls = ray.get(ds.map_batches(_null_rows, fn_kwargs=dict(key=key),
                                   batch_format="pyarrow").to_arrow_refs())
    return table, counts, pa.concat_tables([_null_rows(table.slice(0, 0), key), *nulls])


class _Mixed(Exception):
    """Shards `a` and `b` hold `column` as two `types`."""

    def __init__(self, column: str, types: tuple[pa.DataType, pa.DataType], a: int, b: int):
        super().__init__(column)
        self.column, self.types, self.a, self.b = column, types, a, b


def _check_types(tables: list[pa.Table]) -> None:
    """_Mixed for the first shard whose key or label column differs in type from the first
    shard that holds it with a type (a column of nulls only goes with any)."""
    seen: dict[str, tuple[pa.DataType, int]] = {}
    for i, table in enumerate(tables):
        for field in table.schema:
            if field.name in (SHARD, ROW) or pa.types.is_null(field.type):
                continue
            t, j = seen.setdefault(field.name, (field.type, i))
            if t != field.type:
                raise _Mixed(field.name, (t, field.type), j, i)


def _null_rows(table: pa.Table, key: str) -> pa.Table:
    """The shard and row of each row of `table` whose key is null."""
    return table.filter(pc.is_null(table.column(key))).select([SHARD, ROW])


def _source_row(record: ShardRecord, row: int) -> tuple[str, int]:
    """The source file and row of row `row` of a shard (as written, before any rewrite)."""
    for r in record.ranges:
        if row < r.rows:
            return r.source or r.block, r.start + row
        row -= r.rows
    return record.source, -1


def _read_batch(batch: pa.Table, store: Store, paths: list[str], key: str, labels: list[str]
                ) -> pa.Table:
    return pa.concat_tables([read_keys(store, paths[i], i, key, labels)
                             for i in batch.column("i").to_pylist()])


def _repeated(counts: pa.Table) -> pa.Table:
    return counts.filter(pc.greater(counts.column("count()"), 1))


def _members(batch: pa.Table, key: str, keys: pa.Array) -> pa.Table:
    return batch.filter(pc.is_in(batch.column(key), value_set=keys))


def _dropped(dups: pa.Table, key: str, policy: str, name: str) -> np.ndarray:
    """Which of the duplicate-key rows `dups` to drop: all but the first (or last) copy of each
    key in source order; an error with a few keys under policy error."""
    if policy == "error":
        keys = pc.unique(dups.column(key))
        raise RaycacheError(
            f"fill of {name}: {len(keys)} key(s) of column {key!r} occur more than once, "
            f"e.g. {keys.to_pylist()[:EXAMPLES]}; no manifest was written. Make the keys "
            "unique (source.key names another column?), or set source.duplicates: first or last "
            "to keep one row per key"
        )
    ordered = dups.sort_by([(SHARD, "ascending"), (ROW, "ascending")])
    if policy == "last":
        ordered = ordered.take(pa.array(np.arange(ordered.num_rows)[::-1]))
    keys = ordered.column(key)
    keep_first = pc.index_in(keys, value_set=keys).to_numpy() == np.arange(len(keys))
    dropped = ordered.filter(pa.array(~keep_first))
    pairs = set(zip(dropped.column(SHARD).to_pylist(), dropped.column(ROW).to_pylist(),
                    strict=True))
    return np.array([(s, r) in pairs for s, r in zip(dups.column(SHARD).to_pylist(),
                                                       dups.column(ROW).to_pylist(),
                                                       strict=True)], bool)


def label_stats(values: pa.ChunkedArray | pa.Array) -> dict[str, Any]:
    """A label column's stats (see _stats), from the column itself."""
    return _stats(value_counts(values))


def stats_of(counts: dict[Any, int]) -> dict[str, Any]:
    """A label column's stats from its count per value (None: nulls)."""
    return _stats(dict(counts))


def counts_of(stats: dict[str, Any]) -> dict[Any, int] | None:
    """A label column's count per value (None: nulls) from its stats, where they keep one
    (small integer ids, or a vocabulary of names); None where they keep only min and max."""
    if "classes" in stats:
        counts = dict(zip(stats["classes"], stats["counts"], strict=True))
    elif "counts" in stats:
        counts = {i: n for i, n in enumerate(stats["counts"]) if n}
    elif stats.get("min") is None and "nulls" in stats:  # nulls only
        counts = {}
    else:
        return None
    if stats.get("nulls"):
        counts[None] = stats["nulls"]
    return counts


def _stats(counts: dict[Any, int]) -> dict[str, Any]:
    """A label column's stats for the manifest, from its count per value (None: nulls):
    nulls, min, max, and every value's count where the values are small ids (with nulls or
    not, so the next version shares the rows of one with nulls); for named labels
    (strings), `classes`, the vocabulary in sorted order, and the count of each."""
    counts = {v: n for v, n in counts.items() if n}
    nulls = counts.pop(None, 0)
    if not counts:
        return {"nulls": nulls, "min": None, "max": None}
    if any(isinstance(v, str) for v in counts):
        names = sorted(counts, key=str)
        out = {"nulls": nulls, "min": names[0], "max": names[-1]}
        if len(names) <= MAX_NAMED:
            out |= {"classes": names, "counts": [counts[v] for v in names]}
        return out
    low, high = min(counts), max(counts)
    out: dict[str, Any] = {"nulls": nulls, "min": low, "max": high}
    if low >= 0 and high < MAX_COUNTED:  # nulls too: their count is `nulls` (shareable)
        out["counts"] = [counts.get(v, 0) for v in range(high + 1)]
    return out



def label_problems(stats: dict[str, dict[str, Any]]) -> list[str]:
    """What a training run will meet in these label columns' stats (by column), in words: null
    labels (refused at training), and integer class ids between 0 and the largest that no row
    holds (a class the head has, yet never sees)."""
    out = []
    for column, s in sorted(stats.items()):
        if s.get("nulls"):
            out.append(f"label {column!r} is null in {s['nulls']} row(s): training on it is "
                       "refused until they are filled or dropped in the source")
        empty = [i for i, n in enumerate(s.get("counts", ())) if not n] \
            if "classes" not in s else []
        if empty:
            shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
            out.append(f"label {column!r} holds no row of class id(s) {shown} (ids run "
                       f"0..{s['max']}): a head would have {len(empty)} class(es) it never "
                       "sees; map the labels to 0..K-1 (or names) in the source")
    return out
