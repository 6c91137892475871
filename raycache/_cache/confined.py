"""What a stored shard entry may name, checked where it is decoded: a file of its folder's
shards/, a home among the store's cache folders, and kept rows that fit its file and its
ranges, so that no reader (verify, export, training, repair) follows one out of the store or
reads rows its version left out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from raycache._core.config import is_name


class Range(Protocol):
    """A row range as an entry holds it (records.RowRange)."""

    start: int
    stop: int

    @property
    def rows(self) -> int: ...

    def to_json(self) -> Any: ...


class ShardEntry(Protocol):
    """What the checks read of a decoded shard entry (records.ShardEntry, which is decoded
    above this module and so is not imported here)."""

    path: str
    rows: int
    home: str
    keep: str
    stored: int

    @property
    def ranges(self) -> Sequence[Range]: ...

    @property
    def live_runs(self) -> Any: ...

__all__ = ["SHARD_PATH", "BadEntry", "entry_problems", "file_name_problem", "home_problem",
           "path_problem"]

SHARD_PATH = re.compile(r"shards/[^/\\:\x00-\x1f]+")
"""What a stored shard `path` may be: one file of its folder's shards/, relative (no absolute
path, scheme or backslash; `.` and `..` refused apart)."""


class BadEntry(ValueError):
    """A shard entry or record, as stored, that a reader must not follow (the shard list's
    reader names the entry in a CorruptCache)."""


def path_problem(path: Any) -> str:
    """What is wrong with a shard's stored `path`, in words ("" where nothing)."""
    if isinstance(path, str) and SHARD_PATH.fullmatch(path) and path[7:] not in (".", ".."):
        return ""
    return (f"path {path!r} is not a file of its folder's shards/: expected shards/<file> "
            "(relative; no '..', absolute path, scheme or backslash)")


def home_problem(home: Any) -> str:
    """What is wrong with a shared entry's stored `home`, in words ("" where nothing)."""
    parts = home.split("/") if isinstance(home, str) else []
    if len(parts) == 2 and all(map(is_name, parts)):
        return ""
    return (f"home {home!r} is not a cache folder of the store: expected <name>/<fingerprint> "
            "(letters, digits, '-', '_' and '.'; no '..', absolute path or scheme)")


def file_name_problem(what: str, name: Any) -> str:
    """What is wrong with a file a manifest names in its own folder (`what`: the shard list,
    the kept-rows list), in words ("" where nothing)."""
    if isinstance(name, str) and is_name(name):
        return ""
    return (f"names its {what} {name!r}: expected a file of the cache's own folder "
            "(letters, digits, '-', '_' and '.'; no '/', '..', absolute path or scheme)")


def entry_problems(e: ShardEntry) -> list[str]:
    """What a reader must not follow in an entry, in words (none: empty): a path outside its
    folder's shards/, a home outside the store's cache folders, ranges that run backwards, or
    kept rows (`keep`, `stored`) that do not fit its rows and ranges."""
    out = [p for p in (path_problem(e.path), e.home and home_problem(e.home)) if p]
    if any(not 0 <= r.start <= r.stop for r in e.ranges):
        out.append(f"a row range that runs backwards, of {[r.to_json() for r in e.ranges]}")
    return out or _selection_problems(e)


def _selection_problems(e: ShardEntry) -> list[str]:
    if not e.keep:
        if e.stored and e.stored != e.rows:
            return [f"stored={e.stored} rows in its file but rows={e.rows} read, with no row "
                    "selection (keep) to say which: expected a keep, or stored equal to rows"]
        return []
    import numpy as np

    from raycache._cache.selection import BadSelection, decode

    if e.stored <= 0 or not e.ranges:
        return [f"a row selection (keep) with stored={e.stored} and {len(e.ranges)} ranges: "
                "expected the file's rows and their places in the source"]
    try:
        mask = decode(e.keep, e.stored)
    except BadSelection as exc:
        return [f"its row selection (keep) over stored={e.stored} rows: {exc}"]
    if (kept := int(np.count_nonzero(mask))) != e.rows:
        return [f"its row selection keeps {kept} rows, the manifest says {e.rows}"]
    if (placed := sum(r.rows for r in e.ranges)) not in (e.stored, e.rows):
        return [f"its ranges place {placed} rows: expected a place in the source for each of "
                f"its file's stored={e.stored} rows, or for each of the rows={e.rows} it keeps"]
    clash = _clash(e, mask)
    return [clash] if clash else []


def _clash(e: ShardEntry, mask: Any) -> str:
    """Two kept rows at one place of the source: a selection that keeps a row its version left
    out (a removed row takes the place of the row after it) and, with the same count, leaves
    out another reads no key twice, yet is wrong. Worked out only where two ranges meet (no two
    rows share a place otherwise), and from the rows where they meet alone where the ranges come
    as a fill writes them."""
    spans = sorted((r.block, r.start, r.stop) for r in e.ranges)
    if all(a[0] != b[0] or b[1] >= a[2] for a, b in zip(spans, spans[1:], strict=False)):
        return ""
    import numpy as np

    if (at := _clash_at_joins(e, mask)) is None:
        blocks, which, starts, stops = e.live_runs
        order = np.lexsort((starts, which))
        which, starts, stops = which[order], starts[order], stops[order]
        clash = np.flatnonzero((which[1:] == which[:-1]) & (starts[1:] < stops[:-1]))
        if not len(clash):
            return ""
        at = int(starts[int(clash[0]) + 1]), blocks[which[int(clash[0]) + 1]]
    if not at:
        return ""
    return (f"its row selection keeps two rows at one place of the source (row {at[0]} of "
            f"file block {at[1][:12]}): it keeps rows its version left out")


def _clash_at_joins(e: ShardEntry, mask: Any) -> tuple[int, str] | tuple[()] | None:
    """The place and block of a clash, () where there is none, looked for only where ranges
    meet; None where the ranges do not come as a fill writes them (each block's in one run, in
    file order, none starting or ending before the one before it, each meeting that one
    alone)."""
    import numpy as np

    if sum(r.rows for r in e.ranges) != len(mask):  # the places of the kept rows alone
        mask = np.ones(e.rows, bool)
    done, before, at = set(), (), 0
    for r in e.ranges:
        if not before or r.block != before[-1].block:
            if r.block in done:
                return None
            done.add(r.block)
            before = ()
        elif r.start < before[-1].start or r.stop < before[-1].stop or (
                len(before) > 1 and r.start < before[-2].stop):
            return None
        elif (n := before[-1].stop - r.start) > 0:
            both = mask[at - n:at] & mask[at:at + n]
            if both.any():
                return r.start + int(np.argmax(both)), r.block
        before = (*before[-1:], r)
        at += r.rows
    return ()
