"""Matching a new version's rows with an older version's: the changed and new source files read
and hashed once, the older version's rows of the files that changed, matched by key and kept
where every column that decides validity is equal; the kept rows selected in their shards."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.columns import hash_column
from raycache._cache.entry_rows import file_path, keeping, kept_index, reads_whole, take_kept
from raycache._cache.reads import map_ordered, parse
from raycache._cache.records import RowRange, ShardEntry
from raycache._fill.plan import Plan
from raycache._fill.reuse import input_hashes
from raycache._source import files as sources

__all__ = ["CODE", "ROW", "Old", "collides", "match", "read_new", "read_old", "rebuilt",
           "validity_columns", "values"]

CODE = "__vcode"
"""A fresh row's source file, as a small integer (its index in the version's block names)."""
ROW = "__vrow"
"""Its row in that file."""
READERS = 2
"""Source units read and hashed at once: hashing holds the GIL (rows are under hashlib's 2 KiB),
so more threads than a read beside the hashing only hold more units in memory."""


def validity_columns(p: Plan) -> list[str]:
    """What decides whether a stored row is still valid: key, labels, each input's hash."""
    src = p.cfg.source
    inputs = dict.fromkeys(e.input for e in p.cfg.encoders)
    return list(dict.fromkeys([src.key, *src.labels, *(hash_column(i) for i in inputs)]))


def read_new(p: Plan, files: list[sources.SourceFile], codes: dict[str, int]) -> pa.Table:
    """Every row of the changed and new source files: key, labels, each input's hash, and
    where it is (CODE: its file's code, ROW)."""
    src = p.cfg.source
    inputs = list(dict.fromkeys(e.input for e in p.cfg.encoders))
    read = list(dict.fromkeys([src.key, *src.labels, *inputs]))
    units, _ = sources.plan_units(files, p.format, src.options, 1 << 20, None, src.key) \
        if files else ([], {})

    def hashed(u: sources.Unit) -> list[pa.Table]:
        parts = []
        for t in sources.read_unit(u, p.format, src.options, 1 << 20, read):
            out = t.select(list(dict.fromkeys([src.key, *src.labels])))
            for i in inputs:
                out = out.append_column(hash_column(i), input_hashes(t.column(i)))
            code = np.full(t.num_rows, codes[u.file.block], np.int32)
            parts.append(out.append_column(CODE, pa.array(code))
                         .append_column(ROW, t.column("__row")))
        return parts

    # on threads: a unit's read and decode (no GIL) beside another's row hashes (GIL held)
    parts = [t for done in map_ordered(hashed, units, READERS) for t in done]
    if not parts:  # the changed files were removed or emptied: no row, every column
        names = list(dict.fromkeys([src.key, *src.labels]))
        return pa.table({**{c: pa.array([], p.schema.field(c).type) for c in names},
                         **{hash_column(i): pa.array([], pa.binary(32)) for i in inputs},
                         CODE: pa.array([], pa.int32()), ROW: pa.array([], pa.int64())})
    return pa.concat_tables(parts, promote_options="default").combine_chunks()


@dataclass
class Old:
    """The kept rows of the base's shards that hold rows of changed or removed files, entry
    after entry: the columns that decide validity, and for each row its place in the file and
    in the source."""

    table: pa.Table
    bounds: np.ndarray
    """Entry i's rows are [bounds[i], bounds[i + 1])."""
    at: np.ndarray
    """Each row's row in its shard file."""
    code: np.ndarray
    """Its source file's code."""
    row: np.ndarray
    """Its row in that file."""


def read_old(p: Plan, touched: list[ShardEntry], codes: dict[str, int]) -> Old | None:
    def read(e: ShardEntry) -> tuple[pa.Table, np.ndarray]:
        with p.store.fs.open(file_path(p.store, "", e), "rb") as f:
            table = parse(f, validity_columns(p))
        at = kept_index(e)
        return (table if reads_whole(e) else table.take(pa.array(at))), at

    if not touched:
        return None
    parts = list(map_ordered(read, touched))
    sizes = np.array([len(at) for _, at in parts], np.int64)
    ranges = [r for e in touched for r in e.ranges]  # the places of every file row
    lengths = np.array([r.rows for r in ranges], np.int64)
    code = np.repeat(np.array([codes[r.block] for r in ranges], np.int32), lengths)
    first = np.repeat(np.array([r.start for r in ranges], np.int64), lengths)
    offset = np.repeat(np.cumsum(lengths) - lengths, lengths)
    starts = np.cumsum([0, *(sum(r.rows for r in e.ranges) for e in touched[:-1])])
    at = np.concatenate([at for _, at in parts])
    kept = np.repeat(starts, sizes) + at  # the kept rows' places among them
    row = first + np.arange(int(lengths.sum())) - offset
    return Old(pa.concat_tables([t for t, _ in parts], promote_options="default")
               .combine_chunks(), np.concatenate([[0], np.cumsum(sizes)]), at, code[kept],
               row[kept])


def match(p: Plan, old: Old | None, fresh: pa.Table, unchanged: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(alive, code, row, kept, known): for each old row, whether the version keeps it and its
    place in the new source (file code, row); for each fresh row, whether an old row holds it,
    and whether its key was an old row's of the files that changed (so no other's). Old
    rows of unchanged files stay; the others are matched with the fresh rows by key and kept
    where every column that decides validity is equal. None where the stored key's type
    differs from the source's."""
    key = p.cfg.source.key
    kept = np.zeros(fresh.num_rows, bool)
    if old is None:
        return np.zeros(0, bool), np.zeros(0, np.int32), np.zeros(0, np.int64), kept, kept
    alive = np.isin(old.code, unchanged)
    code, row = old.code.copy(), old.row.copy()
    moved = np.flatnonzero(~alive)
    candidates = old.table if len(moved) == len(alive) else old.table.take(pa.array(moved))
    if candidates.column(key).type != fresh.column(key).type:
        return None
    at = pc.index_in(candidates.column(key), value_set=fresh.column(key))
    found = ~np.asarray(pc.is_null(at))
    ok = found.copy()
    idx = np.asarray(pc.fill_null(at, 0)).astype(np.int64)
    for c in validity_columns(p)[1:] if ok.any() else ():  # (none found: no fresh rows)
        ok &= _equal(candidates.column(c), fresh.column(c).take(pa.array(idx)))
    alive[moved[ok]] = True
    code[moved[ok]] = fresh.column(CODE).to_numpy()[idx[ok]]
    row[moved[ok]] = fresh.column(ROW).to_numpy()[idx[ok]]
    kept[idx[ok]] = True
    known = np.zeros(fresh.num_rows, bool)
    known[idx[found]] = True
    return alive, code, row, kept, known


def _equal(a: pa.ChunkedArray | pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise equality, two nulls equal; values of types that do not compare differ."""
    try:
        eq = pc.equal(a, b) if a.type == b.type else pc.equal(a, b.cast(a.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return np.zeros(len(a), bool)
    both = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(pc.fill_null(eq, False), both))


def rebuilt(touched: list[ShardEntry], old: Old | None, alive: np.ndarray,
            code: np.ndarray, row: np.ndarray, names: list[str]) -> list[ShardEntry]:
    """The touched entries as the new version shares them: the rows still valid selected, the
    places of the file's rows in the new source as ranges; entries that keep no row left
    out."""
    out = []
    for i, e in enumerate(touched):
        if old is None:
            break
        lo, hi = old.bounds[i], old.bounds[i + 1]
        live = alive[lo:hi]
        if not live.any():
            continue
        at = old.at[lo:hi][live]
        mask = np.zeros(e.file_rows, bool)
        mask[at] = True
        places = _places(e.file_rows, at, code[lo:hi][live], row[lo:hi][live])
        out.append(keeping(e, mask, ranges=_runs(*places, names)))
    return out


def _places(n: int, at: np.ndarray, code: np.ndarray, row: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """(file code, row) of each of a shard file's n rows, given those of its kept rows `at`:
    a row left out takes the place after the kept row before it (before the first, the place
    before the first), so the rows a version leaves out do not cut its ranges up."""
    codes = np.zeros(n, np.int32)
    rows = np.zeros(n, np.int64)
    codes[at], rows[at] = code, row
    last = np.where(np.isin(np.arange(n), at), np.arange(n), -1)
    np.maximum.accumulate(last, out=last)
    last[last < 0] = at.min()
    return codes[last], np.maximum(rows[last] + np.arange(n) - last, 0)


def _runs(codes: np.ndarray, rows: np.ndarray, names: list[str]) -> tuple[RowRange, ...]:
    """Consecutive rows of one file as ranges, in the order given."""
    if not len(rows):
        return ()
    cut = np.ones(len(rows), bool)
    cut[1:] = (codes[1:] != codes[:-1]) | (rows[1:] != rows[:-1] + 1)
    starts = np.flatnonzero(cut)
    ends = np.append(starts[1:], len(rows)) - 1
    return tuple(RowRange(names[c], a, b + 1) for c, a, b in zip(
        codes[starts].tolist(), rows[starts].tolist(), rows[ends].tolist(), strict=True))


def collides(p: Plan, todo: pa.ChunkedArray, kept: pa.ChunkedArray,
              unknown: pa.ChunkedArray, carried: list[ShardEntry]) -> bool:
    """Whether the keys of the rows to write (`todo`) repeat, or include the key of a row the
    version keeps: of the changed files (`kept`), or in a carried shard (looked for only for
    the keys no old row of the changed files held, `unknown`: the base's keys were unique)."""
    if len(todo) and pc.count_distinct(todo).as_py() != len(todo) - todo.null_count:
        return True
    if len(todo) and len(kept) and pc.any(pc.is_in(todo, value_set=kept)).as_py():
        return True
    return _in_shards(p, unknown, carried)


def _in_shards(p: Plan, keys: pa.ChunkedArray, carried: list[ShardEntry]) -> bool:
    """Whether any of `keys` is a kept row's key in the carried shards: only the shards whose
    key statistics (Parquet footers) could hold one are read."""
    keys = keys.drop_null().combine_chunks()
    if not len(keys):
        return False
    low, high = pc.min_max(keys).values()
    key = p.cfg.source.key

    def hit(e: ShardEntry) -> bool:
        with p.store.fs.open(file_path(p.store, "", e), "rb") as f:
            pf = pq.ParquetFile(f)
            i = pf.schema_arrow.get_field_index(key)
            bounds = [pf.metadata.row_group(g).column(i).statistics
                      for g in range(pf.metadata.num_row_groups)]
            if all(s is not None and s.has_min_max and (s.max < low.as_py() or s.min > high.as_py())
                   for s in bounds):
                return False
            column = take_kept(e, pf.read(columns=[key]).column(0))
        return bool(pc.any(pc.is_in(column, value_set=keys)).as_py())

    return any(map_ordered(hit, carried))


def values(column: pa.ChunkedArray | pa.Array) -> Counter:
    """How often each value occurs (None: nulls)."""
    counted = pc.value_counts(column)
    return Counter(dict(zip(counted.field("values").to_pylist(),
                            counted.field("counts").to_pylist(), strict=True)))
