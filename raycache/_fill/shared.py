"""What a version shares, as a fill's steps ask it: a `Version` (the rows of an older version,
the base: its shard files referred to, the sparse ones copied) or `Whole` (nothing shared: every
row the fill's own). Both answer the same questions, so the fill's run (raycache._fill.run)
reads the same whatever a version shares; how a Version is planned is raycache._fill.versions."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from raycache._cache.entry_rows import folder_path
from raycache._cache.manifest import Manifest
from raycache._cache.records import RowRange, ShardEntry, ShardRecord, spans_by_block
from raycache._fill.commit import done_ranges, scan_keys
from raycache._fill.keys import stats_of
from raycache._fill.plan import Plan
from raycache._fill.reuse import Either, Reuse
from raycache._fill.summary import KeySummary
from raycache._source.files import Ranges, Span

__all__ = ["Resumed", "Shares", "Version", "Whole", "copy_sparse"]


@dataclass
class Resumed:
    """A fill's own shards before it encodes: those an interrupted run wrote that it keeps,
    and the shared shards it copied (compaction)."""

    records: list[ShardRecord]
    """The resumed records and the compacted ones: the fill's shards so far."""
    resumed_rows: int
    """Rows of the resumed records."""
    compacted: list[ShardRecord]
    """Shards written again from sparse shared ones, their kept rows copied."""
    covered: dict[str, Ranges]
    """The source rows held already (own shards and shared entries), per file block."""


class Shares(Protocol):
    """What the fill's steps ask of what a version shares (`Version` or `Whole`)."""

    carried: list[ShardEntry] | tuple[()]
    totals: dict[str, int] | None

    @property
    def rows(self) -> int: ...

    @property
    def dims(self) -> dict[str, int] | None: ...

    def resume(self, p: Plan, done: list[ShardRecord]) -> Resumed: ...

    def keys(self, p: Plan, records: list[ShardRecord], cluster: bool,
             summaries: dict[str, KeySummary] | None = None
             ) -> tuple[list[ShardRecord], dict[str, Any]]: ...

    def base_fingerprint(self, p: Plan) -> str: ...

    def reuse(self, p: Plan, store: Callable[[frozenset], Reuse | None]
              ) -> Reuse | Either | None: ...


@dataclass(frozen=True)
class Whole:
    """A version that shares nothing: every row is the fill's own (a first fill, `share:
    false`, no older version that fits, a fill over a manifest given no version)."""

    carried: tuple[()] = ()
    totals: None = None
    rows: int = 0
    dims: None = None

    def resume(self, p: Plan, done: list[ShardRecord]) -> Resumed:
        """The resumed records as they are."""
        return Resumed(done, sum(r.rows for r in done), [], done_ranges(done))

    def keys(self, p: Plan, records: list[ShardRecord], cluster: bool,
             summaries: dict[str, KeySummary] | None = None
             ) -> tuple[list[ShardRecord], dict[str, Any]]:
        """(records, label stats): every row's key and labels scanned (`summaries`: the
        writers', by shard path)."""
        return scan_keys(p, records, cluster=cluster, summaries=summaries)

    def base_fingerprint(self, p: Plan) -> str:
        """The fingerprint of the base, the version it shares rows with: none."""
        return ""

    def reuse(self, p: Plan, store: Callable[[frozenset], Reuse | None]) -> Reuse | None:
        """Reuse by content from the store's other caches (`store(leave)`)."""
        return store(frozenset())


@dataclass
class Version:
    """What a new version takes from an older one (`base`): the entries it shares, as its
    shard list will name them, and what the fill still has to do."""

    base: Manifest
    carried: list[ShardEntry]
    """Shared entries: `home` set, their `ranges` in the new source's rows."""
    totals: dict[str, int]
    """Rows of each source file the version did not read (unchanged: known from the base)."""
    counts: dict[str, Counter]
    """Each counted label column's count per value over the carried rows (None: nulls)."""
    lent: Reuse | None
    """The embeddings of the rows it no longer shares (changed, compacted), by input hash."""
    read_rows: int = 0
    """Rows of changed or new source files read and hashed to match them."""
    sparse: list[ShardEntry] = dataclasses.field(default_factory=list)
    """Shared shards to write again in the version's folder (compaction), their kept rows
    copied."""
    files: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)
    """Each source file block's URI and rows (what a copied shard's ranges name)."""
    stats: dict[str, Any] | None = None
    """The version's label stats where they are known whole (a repair or a compaction of a
    committed version: the same rows), else counted from `counts` and the new rows."""

    @property
    def rows(self) -> int:
        """Rows the version shares."""
        return sum(e.rows for e in self.carried)

    @property
    def dims(self) -> dict[str, int]:
        """Each encoder's dimension, as the older version recorded it."""
        return {e.name: e.dim for e in self.base.encoders}

    def covered(self, records: list[ShardRecord] = ()) -> dict[str, Ranges]:
        """The new source's rows the carried entries hold (and `records`, a fill's own shards),
        per file block, merged."""
        return {b: _merged(*ab) for b, ab in spans_by_block(records, self.carried).items()}

    def keeps(self, record: ShardRecord, covered: dict[str, Ranges]) -> bool:
        """Whether a resumed shard record holds no row the carried entries hold (`covered`)."""
        return not any(s.start < r.stop and r.start < s.stop
                       for r in record.ranges for s in covered.get(r.block, ()))

    def resume(self, p: Plan, done: list[ShardRecord]) -> Resumed:
        """The resumed records that hold no shared row, and the sparse shared shards copied."""
        shared = self.covered()
        done = [r for r in done if self.keeps(r, shared)]
        compacted = copy_sparse(p, self, done) if self.sparse else []
        return Resumed(done + compacted, sum(r.rows for r in done), compacted,
                       self.covered(done + compacted))

    def keys(self, p: Plan, records: list[ShardRecord], cluster: bool,
             summaries: dict[str, KeySummary] | None = None
             ) -> tuple[list[ShardRecord], dict[str, Any]]:
        """(records, label stats): the shared rows' keys and counts are known, so only the
        fill's own rows are scanned (`summaries`: the writers', by shard path)."""
        records, counts = scan_keys(p, records, cluster=cluster, raw=True,
                                    summaries=summaries) if records else (records, {})
        return records, self.label_stats(counts)

    def label_stats(self, new: dict[str, Counter]) -> dict[str, Any]:
        """The version's label stats: the carried rows' counts and the new rows' (`new`, the
        counts of the shards the fill wrote)."""
        if self.stats is not None:
            return self.stats
        return {c: stats_of(counts + new.get(c, Counter())) for c, counts in self.counts.items()}

    def base_fingerprint(self, p: Plan) -> str:
        """The fingerprint of the base, the older version it shares rows with
        ("": the version itself, made again by a repair or a compaction)."""
        return self.base.fingerprint if self.base.fingerprint != p.fingerprint else ""

    def reuse(self, p: Plan, store: Callable[[frozenset], Reuse | None]) -> Either:
        """Reuse by content from the rows the version no longer shares first, then from the
        store's other caches (`store(leave)`, scanned only when a row is looked up there),
        leaving out the older version's own shard files."""
        base = self.base
        own = p.store.cache_dir(base.name, base.fingerprint)
        leave = frozenset((folder_path(p.store, own, e), e.path) for e in base.shards)
        return Either(self.lent, lambda: store(leave))


def _merged(starts: np.ndarray, stops: np.ndarray) -> Ranges:
    """Row spans as sorted, merged Spans."""
    order = np.argsort(starts, kind="stable")
    starts, stops = starts[order], np.maximum.accumulate(stops[order])
    cut = np.ones(len(starts), bool)
    cut[1:] = starts[1:] > stops[:-1]
    first = np.flatnonzero(cut)
    last = np.append(first[1:], len(starts)) - 1
    return tuple(Span(a, b) for a, b in zip(starts[first].tolist(), stops[last].tolist(),
                                            strict=True))


def copy_sparse(p: Plan, version: Version, done: list[ShardRecord]) -> list[ShardRecord]:
    """Compaction: the sparse shared shards' kept rows copied into shards of the version's
    folder, small ones gathered up to rows_per_shard a shard (a resumed fill's copies kept);
    their records."""
    from raycache._cache.store import shard_name
    from raycache._fill.shards import copy_kept

    have = {r.path for r in done}
    dims = {e.name: e.dim for e in version.base.encoders if not e.trainable}
    out, group = [], []
    order = sorted(version.sparse, key=lambda e: min((r.block, r.start)
                                                     for r in e.live_ranges()))
    for e in [*order, None]:
        if e is not None and (not group or sum(g.rows for g in group) + e.rows
                              <= p.cfg.rows_per_shard):
            group.append(e)
            continue
        ranges = tuple(RowRange(r.block, r.start, r.stop, *version.files[r.block])
                       for g in group for r in g.live_ranges())
        if shard_name(ranges) not in have:
            out.append(copy_kept(p.store, p.dir, p.fingerprint, group, ranges, dims))
        group = [e]
    return out
