"""A version's place in its name's history: a sequence number fixed at its first commit, kept by
every later commit of the same version (repair, compaction, a retry of skipped rows)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

__all__ = ["HISTORY", "Place", "history", "place_of"]

HISTORY = "history"
"""The key in a manifest's `extra` of its place: {"sequence": n, "first_committed": ISO date}.
In `extra`, so that every raycache that reads format 5 still reads the manifest."""

T = TypeVar("T")


@dataclass(frozen=True, order=True)
class Place:
    """Where a version stands among its name's versions; compared as (sequence, first commit,
    fingerprint).

    Example:
        ```python
        place = raycache.open_cache("docs").manifest.place
        print(place.sequence, place.first_committed)
        ```
    """

    sequence: int
    """1 + the highest sequence among the name's versions when it was first committed; 0 for a
    manifest written before sequence numbers (they all come before the numbered ones)."""
    first: float
    """When it was first committed (seconds since the epoch): its `created` before 0.6 and for
    versions a repair or compaction never re-committed."""
    fingerprint: str
    """Breaks the tie of two versions committed at once."""

    @property
    def first_committed(self) -> str:
        """`first` as ISO 8601 text."""
        return datetime.fromtimestamp(self.first).astimezone().isoformat(timespec="seconds")


def place_of(fingerprint: str, created: str, extra: dict) -> Place:
    """The place a manifest records (`extra[HISTORY]`), or, for one written before places
    were, its sequence 0 and `created`."""
    rec = extra.get(HISTORY) if isinstance(extra, dict) else None
    rec = rec if isinstance(rec, dict) else {}
    seq = rec.get("sequence", 0)
    first = rec.get("first_committed") or created
    return Place(seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
                 _seconds(first, created), fingerprint)


def history(items: Iterable[T], name: Callable[[T], str], place: Callable[[T], Place]
            ) -> list[T]:
    """Versions oldest first: by first commit across names, and within each name by its
    history (`place`), whatever a later repair or compaction wrote as `created`."""
    items = list(items)
    by_time = sorted(items, key=lambda x: (place(x).first, name(x), place(x).fingerprint))
    slots: dict[str, list[int]] = defaultdict(list)
    for i, x in enumerate(by_time):
        slots[name(x)].append(i)
    out: list[T] = list(by_time)
    for where in slots.values():
        ordered = sorted((by_time[i] for i in where), key=place)
        for i, x in zip(where, ordered, strict=True):
            out[i] = x
    return out


def _seconds(text: object, fallback: str) -> float:
    for value in (text, fallback):
        try:
            return datetime.fromisoformat(str(value)).timestamp()
        except ValueError:
            continue
    return 0.0
