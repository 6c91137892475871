"""Versions that share storage: a new version of a cache refers to the rows of the newest
earlier version that are still valid, in that version's shard files, and leaves only the rest
to the fill: the rows that changed or are new, and the rows of shards too sparse to share.

A row is still valid when its key, labels and every encoder input (by its sha256) are equal,
under the same encoders, views and shard size (anything else is a new row, its embedding
still reused by content). Files of the source that did not change (same URI, size and
version) are not read: their rows' shards are referred to as they are. A changed or new file
is read and hashed once and matched by key with the rows the older version took from the files
that changed; a shard that keeps only part of its rows carries a row selection
(raycache.cache.selection). Label counts follow without a scan of the kept rows."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache.cache.columns import hash_column
from raycache.cache.committed import scan
from raycache.cache.manifest import Manifest
from raycache.cache.reads import map_ordered, parse, shard_path
from raycache.cache.records import RowRange, ShardEntry, ShardRecord
from raycache.cache.selection import decode, encode
from raycache.cache.store import SHARDS
from raycache.fill.keys import counts_of, named, stats_of
from raycache.fill.plan import Plan
from raycache.fill.reuse import Lookup, Reuse, Source, input_hashes, whole
from raycache.source import files as sources
from raycache.source.files import Ranges, Span

__all__ = ["MAX_SMALL_SHARDS", "Version", "base_of", "plan_version"]

MAX_SMALL_SHARDS = 16
"""Shared shards under half of rows_per_shard that a version keeps before it compacts them."""
BLOCK = "__vblock"
ROW = "__vrow"


@dataclass
class Version:
    """What a new version takes from an older one (`base`): the entries it shares, as its
    shard list will name them, and what the fill still has to do."""

    base: Manifest
    carried: list[ShardEntry]
    """Shared entries: `home` set, their kept rows' `ranges` in the new source's rows."""
    totals: dict[str, int]
    """Rows of each source file the version did not read (unchanged: known from the base)."""
    counts: dict[str, Counter]
    """Each counted label column's count per value over the carried rows (None: nulls)."""
    reuse: Reuse | None
    """The embeddings of the rows it no longer shares (changed, compacted), by input hash."""
    read_rows: int = 0
    """Rows of changed or new source files read and hashed to match them."""
    compacted: int = 0
    """Shared shards written again because too few of their rows were kept."""

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.carried)

    def covered(self) -> dict[str, Ranges]:
        """The new source's rows the carried entries hold, per file block."""
        spans: dict[str, list[Span]] = defaultdict(list)
        for e in self.carried:
            for r in e.ranges:
                spans[r.block].append(Span(r.start, r.stop))
        return {k: _merged(v) for k, v in spans.items()}

    def keeps(self, record: ShardRecord, covered: dict[str, Ranges]) -> bool:
        """Whether a resumed shard record holds no row the carried entries hold (`covered`)."""
        return not any(s.start < r.stop and r.start < s.stop
                       for r in record.ranges for s in covered.get(r.block, ()))

    def label_stats(self, new: dict[str, Counter]) -> dict[str, Any]:
        """The version's label stats: the carried rows' counts and the new rows' (`new`, the
        counts of the shards the fill wrote)."""
        return {c: stats_of(counts + new.get(c, Counter())) for c, counts in self.counts.items()}


def _merged(spans: Iterable[Span]) -> Ranges:
    out: list[Span] = []
    for s in sorted(spans):
        if out and s.start <= out[-1].stop:
            out[-1] = Span(out[-1].start, max(out[-1].stop, s.stop))
        else:
            out.append(s)
    return tuple(out)


def counted(p: Plan) -> list[str]:
    """The label columns whose values the manifest counts (integers and names)."""
    return [c for c in p.cfg.source.labels
            if pa.types.is_integer(t := p.schema.field(c).type) or named(t)]


def unfit(p: Plan, m: Manifest) -> str | None:
    """Why the committed version `m` cannot lend rows to the plan's version (None: it can)."""
    src, old = p.inputs["source"], m.inputs.get("source", {})
    if m.format_version < 4:
        return f"format {m.format_version} (shards before format 4 are not shared)"
    if m.inputs.get("encoders") != p.inputs["encoders"]:
        return "other encoders"
    if m.inputs.get("views") != p.inputs.get("views"):
        return "other views"
    if m.inputs.get("rows_per_shard") != p.inputs["rows_per_shard"]:
        return "another rows_per_shard"
    for k in ("format", "key", "labels", "duplicates"):
        if old.get(k) != src[k]:
            return f"another source {k}"
    if m.label_types != {c: str(p.schema.field(c).type) for c in p.cfg.source.labels}:
        return "other label types"
    for c in counted(p):
        if counts_of(m.label_stats.get(c, {})) is None:
            return f"label {c!r} not counted per value"
    return None


def base_of(p: Plan) -> Manifest | None:
    """The newest committed version of the plan's cache that can lend it rows."""
    caches, _ = scan(p.store, p.cfg.name)
    for c in reversed(caches):
        if c.fingerprint != p.fingerprint and unfit(p, c.manifest) is None:
            return c.manifest
    return None


def plan_version(p: Plan) -> Version | None:
    """What the plan's version shares with the newest fit earlier version (None: there is
    none, or sharing would need what only a whole fill does: see `_refuse`)."""
    base = base_of(p)
    if base is None:
        return None
    own = f"{base.name}/{base.fingerprint}"
    entries = [e if e.home else dataclasses.replace(e, home=own) for e in base.shards]
    if _lost(p, entries):
        return None  # a file it names is gone: a whole fill (reuse by content) rebuilds it
    old_blocks = {sources.SourceFile(f["uri"], f["size"], f["version"]).block
                  for f in base.inputs["source"]["files"]}
    unchanged = old_blocks & {f.block for f in p.files}
    totals: Counter = Counter()
    for e in entries:
        for r in e.ranges:
            if r.block in unchanged:
                totals[r.block] += r.rows
    carried = [e for e in entries if all(r.block in unchanged for r in e.ranges)]
    touched = [e for e in entries if not all(r.block in unchanged for r in e.ranges)]
    labels = counted(p)
    counts = {c: Counter(counts_of(base.label_stats[c])) for c in labels}
    columns = _columns(p)
    changed = [f for f in p.files if f.block not in unchanged]
    fresh = _read_new(p, changed)
    read_rows = fresh.num_rows
    old = _read_old(p, touched, columns, unchanged)
    matched, gone = _match(p, old, fresh)
    if matched is None:
        return None
    for c in labels:  # rows no longer valid leave the counts
        counts[c].subtract(_values(gone.column(c)))
    rebuilt = _rebuilt(touched, old, matched)
    carried += rebuilt
    if _collides(p, fresh, matched, carried):
        return None
    carried, sparse = _compaction(p, carried)
    if sparse:
        for c, values in _labels_of(p, sparse, labels).items():
            counts[c].subtract(values)
    reuse = _reuse(p, base, touched + sparse) if p.cfg.reuse else None
    return Version(base, carried, dict(totals), counts, reuse, read_rows, len(sparse))


def _lost(p: Plan, entries: list[ShardEntry]) -> bool:
    """Whether any shared file is missing or of another size (one listing per folder)."""
    by_home: dict[str, list[ShardEntry]] = defaultdict(list)
    for e in entries:
        by_home[e.home].append(e)
    for home, group in by_home.items():
        folder = p.store.path(home)
        there = {path[len(folder) + 1:]: size
                 for path, (size, _) in p.store.files(f"{folder}/{SHARDS}").items()}
        if any(there.get(e.path) != e.bytes for e in group):
            return True
    return False


def _columns(p: Plan) -> list[str]:
    """What decides whether a stored row is still valid: key, labels, each input's hash."""
    src = p.cfg.source
    inputs = dict.fromkeys(e.input for e in p.cfg.encoders)
    return list(dict.fromkeys([src.key, *src.labels, *(hash_column(i) for i in inputs)]))


def _read_new(p: Plan, files: list[sources.SourceFile]) -> pa.Table:
    """Every row of the changed and new source files: key, labels, each input's hash, and
    where it is (BLOCK, ROW)."""
    src = p.cfg.source
    inputs = list(dict.fromkeys(e.input for e in p.cfg.encoders))
    read = list(dict.fromkeys([src.key, *src.labels, *inputs]))
    if not files:
        return pa.table({src.key: pa.array([], p.schema.field(src.key).type),
                         BLOCK: pa.array([], pa.string()), ROW: pa.array([], pa.int64())})
    units, _ = sources.plan_units(files, p.format, src.options, 1 << 20, None, src.key)
    parts = []
    for u in units:
        for t in sources.read_unit(u, p.format, src.options, 1 << 20, read):
            out = t.select([src.key, *src.labels])
            for i in inputs:
                out = out.append_column(hash_column(i), input_hashes(t.column(i)))
            parts.append(out.append_column(BLOCK, t.column("__block"))
                         .append_column(ROW, t.column("__row")))
    return pa.concat_tables(parts, promote_options="default").combine_chunks()


def _read_old(p: Plan, touched: list[ShardEntry], columns: list[str], unchanged: set[str]
              ) -> pa.Table | None:
    """The kept rows of the base's shards that hold rows of changed or removed files: the
    columns that decide validity, each row's entry (index into `touched`), its row in the
    file, its place in the source (BLOCK, ROW), and whether that file is unchanged."""
    def read(i: int) -> pa.Table:
        e = touched[i]
        with p.store.fs.open(shard_path(p.store, "", e), "rb") as f:
            table = parse(f, columns)
        at = np.flatnonzero(decode(e.keep, e.file_rows)) if e.keep else np.arange(e.file_rows)
        table = table.take(pa.array(at))
        blocks = np.repeat(np.array([r.block for r in e.ranges], object),
                           [r.rows for r in e.ranges])
        rows = np.concatenate([np.arange(r.start, r.stop) for r in e.ranges])
        return (table.append_column("__entry", pa.array(np.full(len(at), i, np.int32)))
                .append_column("__at", pa.array(at))
                .append_column(BLOCK, pa.array(blocks, pa.string()))
                .append_column(ROW, pa.array(rows, pa.int64()))
                .append_column("__same", pa.array(np.isin(blocks, list(unchanged)))))
    if not touched:
        return None
    return pa.concat_tables(list(map_ordered(read, range(len(touched)))),
                            promote_options="default").combine_chunks()


def _match(p: Plan, old: pa.Table | None, fresh: pa.Table
           ) -> tuple[dict[int, np.ndarray] | None, pa.Table]:
    """For each touched entry, its kept rows' new place in the source: a (rows, 2) array of
    (index of the new block in `fresh`'s blocks, row), -1 where the row is gone; and the old
    rows that are gone (their labels leave the counts). (None, ...) where the stored key type
    differs from the source's."""
    key = p.cfg.source.key
    if old is None:
        return {}, pa.table({c: pa.array([], p.schema.field(c).type)
                             for c in p.cfg.source.labels})
    same = old.column("__same").to_numpy(zero_copy_only=False)
    candidates = old.filter(pa.array(~same))
    if candidates.column(key).type != fresh.column(key).type:
        return None, old
    at = pc.index_in(candidates.column(key), value_set=fresh.column(key))
    found = ~np.asarray(pc.is_null(at))
    idx = np.asarray(pc.fill_null(at, 0)).astype(np.int64)
    ok = found.copy()
    for c in _columns(p)[1:]:
        a, b = candidates.column(c), fresh.column(c).take(pa.array(idx))
        ok &= _equal(a, b)
    where: dict[int, np.ndarray] = {}
    entry = old.column("__entry").to_numpy()
    block = old.column(BLOCK).to_numpy(zero_copy_only=False).astype(object)
    row = old.column(ROW).to_numpy().copy()
    moved = np.flatnonzero(~same)
    block[moved[ok]] = fresh.column(BLOCK).to_numpy(zero_copy_only=False)[idx[ok]]
    row[moved[ok]] = fresh.column(ROW).to_numpy()[idx[ok]]
    alive = same.copy()
    alive[moved[ok]] = True
    for i in np.unique(entry):
        sel = entry == i
        where[int(i)] = np.stack([block[sel], row[sel], alive[sel]], axis=1)
    return where, candidates.filter(pa.array(~ok))


def _equal(a: pa.ChunkedArray | pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise equality, two nulls equal."""
    eq = pc.equal(a, b) if a.type == b.type else pc.equal(a, b.cast(a.type))
    both = pc.and_(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(pc.fill_null(eq, False), both))


def _rebuilt(touched: list[ShardEntry], old: pa.Table | None,
             where: dict[int, np.ndarray]) -> list[ShardEntry]:
    """The touched entries as the new version shares them: the rows still valid selected, their
    ranges in the new source; entries that keep no row left out."""
    out = []
    at = None if old is None else old.column("__at").to_numpy()
    entry = None if old is None else old.column("__entry").to_numpy()
    for i, e in enumerate(touched):
        info = where.get(i)
        if info is None or at is None or entry is None:
            continue
        alive = info[:, 2].astype(bool)
        if not alive.any():
            continue
        rows_at = at[entry == i][alive]
        mask = np.zeros(e.file_rows, bool)
        mask[rows_at] = True
        ranges = _runs(info[alive, 0], info[alive, 1].astype(np.int64))
        whole = bool(mask.all())
        out.append(dataclasses.replace(
            e, rows=int(mask.sum()), ranges=ranges, keep="" if whole else encode(mask),
            stored=0 if whole else e.file_rows))
    return out


def _runs(blocks: np.ndarray, rows: np.ndarray) -> tuple[RowRange, ...]:
    """Consecutive rows of one block as ranges, in the order given."""
    if not len(rows):
        return ()
    cut = np.ones(len(rows), bool)
    cut[1:] = (blocks[1:] != blocks[:-1]) | (rows[1:] != rows[:-1] + 1)
    starts = np.flatnonzero(cut)
    ends = [*starts[1:].tolist(), len(rows)]
    return tuple(RowRange(str(blocks[a]), int(rows[a]), int(rows[b - 1]) + 1)
                 for a, b in zip(starts.tolist(), ends, strict=True))


def _collides(p: Plan, fresh: pa.Table, where: dict[int, np.ndarray],
              carried: list[ShardEntry]) -> bool:
    """Whether a row to encode has the key of a row the version keeps (a duplicate key that a
    whole fill handles as source.duplicates says), or the rows to encode repeat a key."""
    key = p.cfg.source.key
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for info in where.values():
        for b, r, alive in info:
            if alive:
                covered[b].append(r)
    todo = np.ones(fresh.num_rows, bool)
    blocks = fresh.column(BLOCK).to_numpy(zero_copy_only=False)
    rows = fresh.column(ROW).to_numpy()
    for b, rs in covered.items():
        todo &= ~((blocks == b) & np.isin(rows, np.array(rs, np.int64)))
    keys = fresh.column(key).filter(pa.array(todo))
    kept = fresh.column(key).filter(pa.array(~todo))
    if len(keys) and pc.count_distinct(keys).as_py() != len(keys) - keys.null_count:
        return True
    if len(kept) and pc.any(pc.is_in(keys, value_set=kept)).as_py():
        return True
    return _in_shards(p, keys, carried)


def _in_shards(p: Plan, keys: pa.Array, carried: list[ShardEntry]) -> bool:
    """Whether any of `keys` is a kept row's key in the carried shards: only the shards whose
    key statistics (Parquet footers) could hold one are read."""
    keys = keys.drop_null()
    if not len(keys):
        return False
    low, high = pc.min_max(keys).values()
    key = p.cfg.source.key

    def hit(e: ShardEntry) -> bool:
        with p.store.fs.open(shard_path(p.store, "", e), "rb") as f:
            pf = pq.ParquetFile(f)
            i = pf.schema_arrow.get_field_index(key)
            bounds = [pf.metadata.row_group(g).column(i).statistics
                      for g in range(pf.metadata.num_row_groups)]
            if all(s is not None and s.has_min_max and (s.max < low.as_py() or s.min > high.as_py())
                   for s in bounds):
                return False
            column = pf.read(columns=[key]).column(0)
        if e.keep:
            column = column.filter(pa.array(decode(e.keep, e.file_rows)))
        return bool(pc.any(pc.is_in(column, value_set=keys)).as_py())

    return any(map_ordered(hit, carried))


def _compaction(p: Plan, carried: list[ShardEntry]) -> tuple[list[ShardEntry], list[ShardEntry]]:
    """(entries kept as they are, entries to write again): those keeping less than
    compact_below of their file's rows, and the small ones once they outnumber
    MAX_SMALL_SHARDS beyond one a source file."""
    below = p.cfg.compact_below
    if not below:
        return carried, []
    sparse = [e for e in carried if e.keep and e.rows < below * e.file_rows]
    small = [e for e in carried if e.rows < p.cfg.rows_per_shard // 2 and e not in sparse]
    if len(small) > MAX_SMALL_SHARDS + len(p.files):  # each file may end in a small one
        sparse += small
    gone = {id(e) for e in sparse}
    return [e for e in carried if id(e) not in gone], sparse


def _labels_of(p: Plan, entries: list[ShardEntry], labels: list[str]) -> dict[str, Counter]:
    """The counts of each label's values over the kept rows of `entries`."""
    def read(e: ShardEntry) -> pa.Table:
        with p.store.fs.open(shard_path(p.store, "", e), "rb") as f:
            table = parse(f, labels)
        return table.filter(pa.array(decode(e.keep, e.file_rows))) if e.keep else table

    out = {c: Counter() for c in labels}
    if labels:
        for t in map_ordered(read, entries):
            for c in labels:
                out[c].update(_values(t.column(c)))
    return out


def _values(column: pa.ChunkedArray | pa.Array) -> Counter:
    """How often each value occurs (None: nulls)."""
    counted = pc.value_counts(column)
    return Counter(dict(zip(counted.field("values").to_pylist(),
                            counted.field("counts").to_pylist(), strict=True)))


def _reuse(p: Plan, base: Manifest, entries: list[ShardEntry]) -> Reuse | None:
    """Reuse by content from the files of `entries` only (the rows the version stops sharing
    come from there): O(rows changed), never a look at the whole store."""
    files = {(e.home, e.path): e for e in entries}
    lookups = {}
    for enc in p.cfg.encoders:
        if not enc.trainable and files:
            lookups[enc.name] = Lookup(
                [Source(p.store.path(home), path, enc.name, hash_column(enc.input), whole(e))
                 for (home, path), e in files.items()], base.encoder(enc.name).dim)
    return Reuse(p.store, lookups) if lookups else None
