"""The rows of a shard entry, wherever its file lives: the one module that knows format 5's
`home` (the older version's folder that holds a file a version shares) and `keep` (the rows of
it the version reads, raycache._cache.selection), so that the code above `_cache/` asks here
instead of following one or decoding the other (docs/concepts.md: share, kept rows)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from raycache._cache.confined import entry_problems
from raycache._cache.records import ShardEntry
from raycache._cache.selection import BadSelection, decode, encode
from raycache._cache.store import Store

__all__ = ["BadSelection", "Selection", "file_path", "folder_of", "folder_path", "is_shared",
           "keeping", "kept_index", "label", "reads_whole", "selection", "selection_problems",
           "shared_from", "take_kept", "whole_file"]


class Selection(NamedTuple):
    """A file's kept rows apart from its entry (a run spec carries them to its workers): the
    selection as the shard list writes it ("": every row) and the rows in the file."""

    keep: str
    """The packed selection (raycache._cache.selection.encode), or "" for every row."""
    rows: int
    """Rows in the file, kept or not."""

    @property
    def whole(self) -> bool:
        """Whether every row of the file is kept."""
        return not self.keep

    def mask(self) -> np.ndarray:
        """One bool per row of the file, set where kept (BadSelection where it cannot be
        read)."""
        return np.ones(self.rows, bool) if self.whole else decode(self.keep, self.rows)

    def index(self) -> np.ndarray:
        """The kept rows' places in the file (0-based, in file order)."""
        return np.arange(self.rows) if self.whole else np.flatnonzero(self.mask())


def selection(entry: ShardEntry) -> Selection:
    """An entry's kept rows, to carry apart from it."""
    return Selection(entry.keep, entry.file_rows)


def is_shared(entry: ShardEntry) -> bool:
    """Whether the entry's file is an older version's, in that version's folder."""
    return bool(entry.home)


def reads_whole(entry: ShardEntry) -> bool:
    """Whether the version reads every row of the entry's file (no selection)."""
    return not entry.keep


def folder_of(entry: ShardEntry, own: str = "") -> str:
    """The "name/fingerprint" of the folder that holds the entry's file: the older version's
    it shares, else `own` (the version's own id; "" where the caller has none to give)."""
    return entry.home or own


def folder_path(store: Store, cache_dir: str, entry: ShardEntry) -> str:
    """The folder that holds the entry's file, in the store's filesystem form: the older
    version's it shares, else `cache_dir` (the version's own folder)."""
    return store.path(entry.home) if entry.home else cache_dir


def file_path(store: Store, cache_dir: str, entry: ShardEntry) -> str:
    """Where the entry's file is, in the store's filesystem form (`cache_dir`: the version's
    own folder; any, even "", where the entry is shared)."""
    return f"{folder_path(store, cache_dir, entry)}/{entry.path}"


def label(entry: ShardEntry) -> str:
    """A name for the entry's file that no other version's file has: its path for a file of
    the version's own folder, "<home>/<path>" for a shared one."""
    return f"{entry.home}/{entry.path}" if entry.home else entry.path


def kept_index(entry: ShardEntry) -> np.ndarray:
    """The places in the file of the rows the version reads (all of them where it reads the
    file whole); BadSelection where the selection cannot be read."""
    return selection(entry).index()


def take_kept(entry: ShardEntry, data: Any) -> Any:
    """The rows of the entry's whole file (a table, an array or a column of it) that the
    version reads; BadSelection where the selection cannot be read, or the file holds another
    number of rows than the entry says."""
    if len(data) != entry.file_rows:
        raise BadSelection(f"shard {label(entry)} holds {len(data)} rows, its entry says "
                           f"{entry.file_rows}")
    return data if reads_whole(entry) else data.filter(pa.array(selection(entry).mask()))


def keeping(entry: ShardEntry, mask: np.ndarray, **changes: Any) -> ShardEntry:
    """The entry reading only the rows of its file that `mask` sets (one bool per row of the
    file), its rows counted; no selection where it sets them all. `changes`: other fields."""
    whole = bool(mask.all())
    return dataclasses.replace(entry, rows=int(mask.sum()), keep="" if whole else encode(mask),
                               stored=0 if whole else entry.file_rows, **changes)


def shared_from(entry: ShardEntry, folder: str) -> ShardEntry:
    """The entry as a later version that shares it reads it: in `folder` ("name/fingerprint",
    the version whose folder holds it) where it was that version's own file."""
    return entry if entry.home else dataclasses.replace(entry, home=folder)


def whole_file(entry: ShardEntry) -> ShardEntry:
    """The entry as its whole file in the folder that holds it (every row, kept or not; no
    home: the caller names the folder): content reuse looks rows up by their place in the file,
    and an embedding stays valid for its input whether a version keeps its row or not."""
    return dataclasses.replace(entry, home="", keep="", stored=0, rows=entry.file_rows)


def selection_problems(entry: ShardEntry) -> tuple[np.ndarray | None, list[str]]:
    """The entry's row selection over its file's rows (None: all rows, or a selection that
    cannot be read), and what is wrong with the entry (raycache._cache.confined: its path,
    home, ranges and kept rows; an entry read from a store has been checked so already)."""
    problems = entry_problems(entry)
    if problems or reads_whole(entry):
        return None, problems
    return decode(entry.keep, entry.file_rows), []
