"""What a fill writes of each shard: the source rows it holds, its progress record, its entry."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from raycache._cache.confined import BadEntry, entry_problems, path_problem

__all__ = ["RowRange", "ShardEntry", "ShardRecord", "SkippedRow", "spans_by_block"]


@dataclass(frozen=True, order=True)
class RowRange:
    """Consecutive source rows [start, stop) of one file version (its block id); in a progress
    record also the file's URI and row count. JSON: [block, start, stop(, source, source_rows)].

    Example:
        ```python
        first = raycache.open_cache("docs").manifest.shards[0].ranges[0]
        print(first.block, first.start, first.stop)
        ```
    """

    block: str
    """The id of the source file's version the rows are in."""
    start: int
    """The first row, counted from the file's start."""
    stop: int
    """One past the last row."""
    source: str | None = None
    """URI of the source file (progress records only)."""
    source_rows: int | None = None
    """Rows in the whole source file (progress records only)."""

    @property
    def rows(self) -> int:
        """Rows in the range."""
        return self.stop - self.start

    def bare(self) -> RowRange:
        """Block, start and stop only: what names a shard and what the manifest records.

        Returns:
            The range without its source and source_rows.
        """
        if self.source is None and self.source_rows is None:
            return self
        return RowRange(self.block, self.start, self.stop)

    def to_json(self) -> list[Any]:
        """Its JSON form.

        Returns:
            [block, start, stop], with source and source_rows where they are set.
        """
        head = [self.block, self.start, self.stop]
        return head if self.source is None else [*head, self.source, self.source_rows]

    @classmethod
    def from_json(cls, data: list[Any]) -> RowRange:
        """The range a JSON form (`to_json`) describes.

        Args:
            data: [block, start, stop], optionally with source and source_rows.

        Returns:
            The range.
        """
        return cls(*data)


@dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest records it: a file of this cache's folder, or (format 5) one
    that an older version of it wrote and this version shares, with the rows it keeps.

    Example:
        ```python
        for entry in raycache.open_cache("docs").manifest.shards:
            print(entry.path, entry.rows, entry.home or "own folder")
        ```
    """

    path: str
    """Relative to the folder that holds it, e.g. `shards/part-<block>-<offset>.parquet`."""
    rows: int
    """Rows this version reads from it (its kept rows where it has a selection)."""
    bytes: int
    """Size of the whole file."""
    sha256: str
    """Checksum (sha256, hex) of the whole file."""
    source: str
    """URI of the source file of the shard's first rows."""
    ranges: tuple[RowRange, ...] = ()
    """The source rows it holds, in file order, block, start and stop only (format 2 on; none
    in format 1). With a `keep` selection, the places of all the file's rows, of which only the
    kept ones count (`live_ranges`): rows deleted in a version do not cut the ranges up (or,
    as docs/format.md allows, the places of the kept rows alone)."""
    home: str = ""
    """The cache folder that holds the file, "name/fingerprint" relative to the store (format
    5: a version sharing an older version's shard); empty: this cache's own folder."""
    keep: str = ""
    """Which of the file's rows this version reads (raycache._cache.selection), empty: all."""
    stored: int = 0
    """Rows in the file, where `keep` selects some of them (0 otherwise: `rows`)."""

    @property
    def file_rows(self) -> int:
        """Rows in the file, kept or not."""
        return self.stored or self.rows

    def live_ranges(self) -> tuple[RowRange, ...]:
        """The source rows this version reads from the file: `ranges`, less the rows its
        selection leaves out.

        Returns:
            The kept rows' ranges (block, start and stop), in file order.
        """
        if not self.keep:
            return self.ranges
        blocks, which, starts, stops = self.live_runs
        return tuple(RowRange(blocks[i], a, b) for i, a, b in zip(
            which.tolist(), starts.tolist(), stops.tolist(), strict=True))

    @functools.cached_property
    def live_runs(self) -> tuple[list[str], Any, Any, Any]:
        """The same as arrays, worked out once: (block names, and per run of consecutive kept
        rows: the index of its block, its first row, its end)."""
        import numpy as np

        blocks = sorted({r.block for r in self.ranges})
        at = {b: i for i, b in enumerate(blocks)}
        code = np.array([at[r.block] for r in self.ranges], np.int64)
        start = np.array([r.start for r in self.ranges], np.int64)
        stop = np.array([r.stop for r in self.ranges], np.int64)
        if not self.keep:
            return blocks, code, start, stop
        from raycache._cache.selection import BadSelection, decode

        lengths = stop - start
        mask = decode(self.keep, self.file_rows)
        if (placed := int(lengths.sum())) == self.rows != len(mask):
            return blocks, code, start, stop  # the places of the kept rows alone
        if placed != len(mask):  # (an entry checked as stored never has them)
            raise BadSelection(f"ranges that place {placed} rows for a file of {len(mask)}")
        which = np.repeat(code, lengths)[mask]
        row = (np.repeat(start - np.cumsum(lengths) + lengths, lengths)
               + np.arange(int(lengths.sum())))[mask]
        cut = np.ones(len(row), bool)
        cut[1:] = (which[1:] != which[:-1]) | (row[1:] != row[:-1] + 1)
        first = np.flatnonzero(cut)
        last = np.append(first[1:], len(row)) - 1
        return blocks, which[first], row[first], row[last] + 1

    @property
    def shared(self) -> bool:
        """Whether another cache folder holds the file."""
        return bool(self.home)

    def to_json(self) -> dict[str, Any]:
        """Its JSON form, as the shard list stores it.

        Returns:
            The fields by name, `home`, `keep` and `stored` only where they are set.
        """
        out = {"path": self.path, "rows": self.rows, "bytes": self.bytes,
               "sha256": self.sha256, "source": self.source,
               "ranges": [r.to_json() for r in self.ranges]}
        out.update({k: getattr(self, k) for k in ("home", "keep", "stored") if getattr(self, k)})
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardEntry:
        """The entry a JSON form (`to_json`) describes, checked: every reader of a stored
        entry gets it here, so none follows one out of the store (raycache._cache.confined).

        Args:
            data: The fields by name.

        Returns:
            The entry.

        Raises:
            BadEntry: What is wrong with it, in words (a ValueError).
        """
        data = dict(data)
        ranges = tuple(RowRange.from_json(r) for r in data.pop("ranges", ()))
        entry = cls(**data, ranges=ranges)
        if problems := entry_problems(entry):
            raise BadEntry("; ".join(problems))
        return entry


_OPTIONAL = ("dims", "reused", "encoded", "encode_started", "written")


@dataclass(frozen=True)
class ShardRecord:
    """A written shard's progress record (`_progress/<name>.json`): what resume, the commit and a
    first pass over landing shards read. Optional fields absent from the JSON are None."""

    path: str
    rows: int
    bytes: int
    sha256: str
    ranges: tuple[RowRange, ...] = ()
    """Full ranges (with source and source rows), in source order."""
    dims: dict[str, int] | None = None
    """Each frozen encoder's embedding size."""
    reused: int | None = None
    """Rows whose every embedding was reused, not encoded."""
    encoded: dict[str, int] | None = None
    """Rows each encoder encoded."""
    encode_started: float | None = None
    written: float | None = None
    """Seconds since the epoch."""

    @property
    def source(self) -> str:
        """URI of the source file of the shard's first rows."""
        return self.ranges[0].source or ""

    def order(self) -> tuple[str, int]:
        """Source order: the first rows' file URI, then their start."""
        return self.source, self.ranges[0].start

    def entry(self) -> ShardEntry:
        """This shard as the manifest records it."""
        return ShardEntry(self.path, self.rows, self.bytes, self.sha256, self.source,
                          tuple(r.bare() for r in self.ranges))

    def replace(self, **changes: Any) -> ShardRecord:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out = {"path": self.path, "rows": self.rows, "bytes": self.bytes, "sha256": self.sha256,
               "ranges": [r.to_json() for r in self.ranges]}
        out.update({k: getattr(self, k) for k in _OPTIONAL if getattr(self, k) is not None})
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardRecord:
        """The record a JSON form describes; BadEntry (a ValueError) where its path is not a
        file of its folder's shards/."""
        data = dict(data)
        ranges = tuple(RowRange.from_json(r) for r in data.pop("ranges", ()))
        if problem := path_problem(data.get("path")):
            raise BadEntry(problem)
        return cls(**data, ranges=ranges)


@dataclass(frozen=True)
class SkippedRow:
    """A source row a fill left out (on_bad_rows: skip): where it is, its key, and why. A
    manifest lists them (`Manifest.skipped`); the next fill of the cache retries them. JSON:
    [block, row, key, source, reason].

    Example:
        ```python
        for row in raycache.open_cache("docs").manifest.skipped:
            print(row.source, row.row, row.key, row.reason)
        ```
    """

    block: str
    """The id of the source file's version it is in."""
    row: int
    """Its row in that file, counted from 0."""
    key: Any
    """Its key value."""
    source: str
    """URI of the source file."""
    reason: str
    """Why it could not be cached (the encoder and its error)."""

    def to_json(self) -> list[Any]:
        """Its JSON form.

        Returns:
            [block, row, key, source, reason].
        """
        return [self.block, self.row, self.key, self.source, self.reason]

    @classmethod
    def from_json(cls, data: list[Any]) -> SkippedRow:
        """The row a JSON form (`to_json`) describes.

        Args:
            data: [block, row, key, source, reason].

        Returns:
            The skipped row.
        """
        return cls(*data)


def spans_by_block(records: Iterable[ShardRecord] = (), entries: Iterable[ShardEntry] = (),
                   skipped: Iterable[SkippedRow] = ()) -> dict[str, tuple[Any, Any]]:
    """Per source file block, (starts, stops) as arrays, unsorted: the rows the shard
    `records` hold, those the `entries` keep (a version's kept rows, worked out as arrays:
    its holes are many), and the rows `skipped`."""
    import numpy as np

    pairs: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        for x in r.ranges:
            pairs.setdefault(x.block, []).append((x.start, x.stop))
    for s in skipped:
        pairs.setdefault(s.block, []).append((s.row, s.row + 1))
    parts: dict[str, list[Any]] = {b: [np.array(v, np.int64).reshape(-1, 2)]
                                   for b, v in pairs.items()}
    for e in entries:
        blocks, which, first, end = e.live_runs
        for i, block in enumerate(blocks):
            sel = which == i
            parts.setdefault(block, []).append(np.stack([first[sel], end[sel]], axis=1))
    return {b: (np.concatenate(v)[:, 0], np.concatenate(v)[:, 1]) for b, v in parts.items()}
