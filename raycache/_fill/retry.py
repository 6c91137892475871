"""The shards of a committed cache's own folder as a fill's records: what a fill over it keeps
(a repair, a compaction, the retry of the rows its fill skipped)."""

from __future__ import annotations

from raycache._cache.committed import Cache
from raycache._cache.entry_rows import BadSelection, is_shared
from raycache._cache.records import RowRange, ShardEntry, ShardRecord
from raycache._source.files import SourceFile

__all__ = ["live", "own_records"]


def own_records(cache: Cache, bad: set[str]) -> list[ShardRecord]:
    """The good shards of the cache's own folder as the fill's shard records: what a resumed
    fill keeps."""
    m = cache.manifest
    uri = {SourceFile.described(f).block: f["uri"]
           for f in m.inputs["source"]["files"]}
    total: dict[str, int] = {}
    for s in m.shards:
        for r in live(s):
            total[r.block] = max(total.get(r.block, 0), r.stop)
    for s in m.skipped:
        total[s.block] = max(total.get(s.block, 0), s.row + 1)
    dims = {e.name: e.dim for e in m.encoders}
    return [ShardRecord(s.path, s.rows, s.bytes, s.sha256, dims=dims,
                        ranges=tuple(RowRange(r.block, r.start, r.stop, uri[r.block],
                                              total[r.block]) for r in s.ranges))
            for s in m.shards if s.path not in bad and not is_shared(s)]


def live(entry: ShardEntry) -> tuple[RowRange, ...]:
    """The source rows an entry reads; none where its selection cannot be read (a repair
    encodes them again: they are the rows no good shard holds)."""
    try:
        return entry.live_ranges()
    except BadSelection:
        return ()
