"""Versions that share storage, planned: a new version of a cache refers to the rows of the
newest earlier version that are still valid, in that version's shard files, and leaves only
the rest to the fill: the rows that changed or are new to encode, and the kept rows of shards
too sparse to share to copy (compaction). The `Version` planned is raycache._fill.shared's.

A row is still valid when its key, labels and every encoder input (by its sha256) are equal,
under the same encoders, views and shard size (anything else is a new row, its embedding
still reused by content). Files of the source that did not change (same URI, size and
version) are not read: their rows' shards are referred to as they are. A changed or new file
is read and hashed once and matched by key with the rows the older version took from the files
that changed; a shard that keeps only part of its rows carries a row selection
(raycache._cache.selection). Label counts follow without a scan of the kept rows."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from raycache._cache.columns import hash_column
from raycache._cache.entry_rows import (
    file_path,
    folder_path,
    reads_whole,
    shared_from,
    take_kept,
    whole_file,
)
from raycache._cache.finding import scan
from raycache._cache.manifest import Manifest
from raycache._cache.reads import map_ordered, parse
from raycache._cache.records import ShardEntry
from raycache._core.caller import warn
from raycache._errors import CorruptCache, DamagedCacheWarning
from raycache._fill.commit import missing
from raycache._fill.keys import counts_of, named
from raycache._fill.matching import (
    CODE,
    Old,
    collides,
    match,
    read_new,
    read_old,
    rebuilt,
    values,
)
from raycache._fill.plan import Plan
from raycache._fill.reuse import Lookup, Reuse, Source
from raycache._fill.shared import Version

__all__ = ["MAX_SMALL_SHARDS", "base_of", "compaction", "plan_version", "within"]

MAX_SMALL_SHARDS = 16
"""Shared shards under half of rows_per_shard that a version keeps before it compacts them."""


def counted(p: Plan) -> list[str]:
    """The label columns whose values the manifest counts (integers and names)."""
    return [c for c in p.cfg.source.labels
            if pa.types.is_integer(t := p.schema.field(c).type) or named(t)]


def unfit(p: Plan, m: Manifest) -> str | None:
    """Why the committed version `m` cannot be the base of the plan's version (None: it can)."""
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
    """The newest committed version of the plan's cache that can be its base; one whose shard
    list cannot be read is passed by (with a DamagedCacheWarning naming it and the fix)."""
    caches, _ = scan(p.store, p.cfg.name)
    for c in reversed(caches):
        if c.fingerprint != p.fingerprint and unfit(p, c.manifest) is None:
            try:
                len(c.manifest.shards)  # its shard list read and checked
            except CorruptCache as exc:  # passed by, as the message says: an older one is the base
                warn(str(exc), DamagedCacheWarning)
                continue
            return c.manifest
    return None


def plan_version(p: Plan) -> Version | None:
    """What the plan's version shares with the newest fit earlier version; None where there
    is none, or where only a whole fill can make the version: a file it names is gone, the
    key's type changed, or a row to write has the key of a row it keeps (the whole fill then
    applies source.duplicates)."""
    base = base_of(p)
    if base is None:
        return None
    own = f"{base.name}/{base.fingerprint}"
    entries = [shared_from(e, own) for e in base.shards]
    if _lost(p, entries):
        return None
    live = {id(e): _per_block(e) for e in entries}  # kept rows per file block
    old_blocks = {b for e in entries for b in live[id(e)]}  # the files of its rows
    unchanged = old_blocks & {f.block for f in p.files}
    names = sorted(old_blocks | {f.block for f in p.files})
    codes = {b: i for i, b in enumerate(names)}
    totals: Counter = Counter()
    for e in entries:
        for block, rows in live[id(e)].items():
            if block in unchanged:
                totals[block] += rows
    carried = [e for e in entries if unchanged.issuperset(live[id(e)])]
    touched = [e for e in entries if not unchanged.issuperset(live[id(e)])]
    labels = counted(p)
    counts = {c: Counter(counts_of(base.label_stats[c])) for c in labels}
    with ThreadPoolExecutor(1) as pool:  # the older shards read while the new rows hash
        reading = pool.submit(read_old, p, touched, codes)
        fresh = read_new(p, [f for f in p.files if f.block not in unchanged], codes)
        old = reading.result()
    matched = match(p, old, fresh, np.array([codes[b] for b in unchanged], np.int32))
    if matched is None:
        return None
    alive, code, row, kept, known = matched
    gone = old.table.filter(pa.array(~alive)) if old else None
    for c in labels:  # rows no longer valid leave the counts
        if gone is not None:
            counts[c].subtract(values(gone.column(c)))
    carried += rebuilt(touched, old, alive, code, row, names)
    key = fresh.column(p.cfg.source.key)
    if collides(p, key.filter(pa.array(~kept)), key.filter(pa.array(kept)),
                 key.filter(pa.array(~kept & ~known)), carried):
        return None
    carried, sparse = compaction(p, carried)
    if sparse:  # their rows are copied into new shards of the version, counted there
        for c, counted_values in _labels_of(p, sparse, labels).items():
            counts[c].subtract(counted_values)
    reuse = _gone(p, base, touched, old, alive) if p.cfg.reuse else None
    rows = Counter(dict(totals))
    if fresh.num_rows:
        for code, n in enumerate(np.bincount(fresh.column(CODE).to_numpy())):
            rows[names[code]] += int(n)
    uris = {f.block: f.uri for f in p.files}
    return Version(base, carried, dict(totals), counts, reuse, fresh.num_rows, sparse=sparse,
                   files={b: (uris[b], rows[b]) for b in uris})


def _per_block(e: ShardEntry) -> dict[str, int]:
    """An entry's kept rows per source file block."""
    blocks, which, starts, stops = e.live_runs
    rows = np.bincount(which, weights=stops - starts, minlength=len(blocks))
    return {b: int(n) for b, n in zip(blocks, rows, strict=True) if n}


def _lost(p: Plan, entries: list[ShardEntry]) -> bool:
    """Whether any shared file is missing or of another size (one listing per folder)."""
    return bool(missing(p.store, entries))


def compaction(p: Plan, carried: list[ShardEntry], budget: float | None = None
               ) -> tuple[list[ShardEntry], list[ShardEntry]]:
    """(entries kept as they are, entries to write again): those keeping less than
    compact_below of their file's rows, the sparsest first, as many as `budget` (a fraction of
    the version's rows; default the config's compact_budget, None: no budget) allows, and those
    under half always; and the small ones once they outnumber MAX_SMALL_SHARDS beyond one a
    source file."""
    below = p.cfg.compact_below
    if not below:
        return carried, []
    budget = p.cfg.compact_budget if budget is None else budget
    rows = sum(e.rows for e in carried)
    sparse, spent = [], 0
    for e in sorted((e for e in carried if not reads_whole(e) and e.rows < below * e.file_rows),
                    key=lambda e: e.rows / e.file_rows):
        if e.rows < 0.5 * e.file_rows or spent + e.rows <= budget * rows:
            sparse.append(e)
            spent += e.rows
    small = [e for e in carried if e.rows < p.cfg.rows_per_shard // 2 and e not in sparse]
    if len(small) > MAX_SMALL_SHARDS + len(p.files):  # each file may end in a small one
        sparse += small
    gone = {id(e) for e in sparse}
    return [e for e in carried if id(e) not in gone], sparse


def _labels_of(p: Plan, entries: list[ShardEntry], labels: list[str]) -> dict[str, Counter]:
    """The counts of each label's values over the kept rows of `entries`."""
    def read(e: ShardEntry) -> pa.Table:
        with p.store.fs.open(file_path(p.store, "", e), "rb") as f:
            return take_kept(e, parse(f, labels))

    out = {c: Counter() for c in labels}
    if labels:
        for t in map_ordered(read, entries):
            for c in labels:
                out[c].update(values(t.column(c)))
    return out


def _gone(p: Plan, base: Manifest, touched: list[ShardEntry], old: Old | None,
          alive: np.ndarray) -> Reuse | None:
    """Reuse by content from the rows the version no longer keeps (an edited label's row
    takes its embedding back), indexed from the hashes already read: no read, no sort of the
    store's."""
    if old is None or alive.all():
        return None
    gone = np.flatnonzero(~alive)
    entry = np.searchsorted(old.bounds, gone, side="right").astype(np.int32) - 1
    lookups = {}
    for enc in p.cfg.encoders:
        if enc.trainable:
            continue
        srcs = [Source(folder_path(p.store, "", e), e.path, enc.name, hash_column(enc.input),
                       whole_file(e))
                for e in touched]
        lookup = Lookup(srcs, base.encoder(enc.name).dim)
        hashes = old.table.column(hash_column(enc.input)).take(pa.array(gone)).combine_chunks()
        flat = np.frombuffer(hashes.buffers()[1], "S32", len(hashes) + hashes.offset
                             )[hashes.offset:]
        lookup.index(flat, entry, old.at[gone].astype(np.int32))
        lookups[enc.name] = lookup
    return Reuse(p.store, lookups) if lookups else None


def within(p: Plan, m: Manifest, keep: list[ShardEntry], sparse: list[ShardEntry] = ()
           ) -> Version:
    """A committed version `m` made again in its own folder (a repair, a compaction): the
    shared entries it `keep`s as they are, `sparse`'s kept rows copied, its rows and label
    stats unchanged; the rest of its rows encoded again."""
    from raycache._fill.retry import live

    rows: Counter = Counter()
    for e in m.shards:
        for r in live(e):  # (none of an entry whose selection cannot be read)
            rows[r.block] += r.rows
    return Version(m, keep, {}, {}, None, 0, stats=m.label_stats, sparse=list(sparse),
                   files={f.block: (f.uri, rows[f.block]) for f in p.files})
