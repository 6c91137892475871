"""Checked reads: a shard read whole and checked against its manifest entry, in parallel
and in order."""


from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from raycache._cache.entry_rows import file_path
from raycache._cache.records import ShardEntry
from raycache._cache.selection import BadSelection, select
from raycache._cache.store import Store
from raycache._cache.vectors import unpack
from raycache._errors import CorruptShard

__all__ = ["THREADS", "cache_label", "map_ordered", "mismatch", "parse", "read_bytes_checked",
           "kept_of", "read_checked", "read_shard", "read_unchecked", "shard_path"]

THREADS = 8
"""Shards read (and hashed: hashlib releases the GIL) at once."""

T = TypeVar("T")
R = TypeVar("R")


def map_ordered(fn: Callable[[T], R], items: Iterable[T], threads: int = THREADS) -> Iterator[R]:
    """fn over items on a thread pool, results in order, at most `threads` under way (so a
    caller that stops early, or holds what it gets, never has every shard in memory at once)."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="raycache-read") as pool:
        ahead: deque[Future[R]] = deque()
        for item in items:
            if len(ahead) >= threads:
                yield ahead.popleft().result()
            ahead.append(pool.submit(fn, item))
        while ahead:
            yield ahead.popleft().result()


def parse(source: Any, columns: list[str] | None = None, filesystem: Any = None) -> pa.Table:
    """A shard's Parquet (a path, an open file or a buffer) as raycache reads shards: decoded on
    this thread (shard readers run on pools of their own: Arrow's threads on top of them only
    contend), its packed vectors unpacked (cache.vectors). An open file or a buffer holding
    every column asked for is read without pyarrow.dataset (its import, and ~2-3 ms a file);
    the rest as before, so that a column it lacks raises as it did (ParquetFile skips it)."""
    if filesystem is None and not isinstance(source, str | os.PathLike):
        file = pq.ParquetFile(source)
        if columns is None or set(columns) <= set(file.schema_arrow.names):
            return unpack(file.read(columns=columns, use_threads=False))
    return unpack(pq.read_table(source, columns=columns, filesystem=filesystem,
                                use_threads=False))


def mismatch(blob: bytes, size: int, sha256: str) -> list[str]:
    """What is wrong with a shard's bytes against the manifest's size and checksum."""
    problems = []
    if len(blob) != size:
        how = "truncated" if len(blob) < size else "longer than written"
        problems.append(f"{len(blob)} bytes, expected {size} ({how})")
    digest = hashlib.sha256(blob).hexdigest()
    if digest != sha256:
        problems.append(f"sha256 {digest[:16]}, expected {sha256[:16]} (first 16 hex digits)")
    return problems


def _corrupt(store: Store, path: str, cache: str, problems: list[str]) -> CorruptShard:
    name, uri = cache.split("/", 1)[0], store.url(path)
    return CorruptShard(
        f"shard {uri} of cache {cache} does not match its manifest entry: "
        f"{'; '.join(problems)}. Re-encode it with `raycache repair {name} --store "
        f"{store.uri}`; `raycache verify {name} --store {store.uri}` lists every bad shard",
        uri, cache, tuple(problems))


def read_bytes_checked(store: Store, path: str, size: int, sha256: str, cache: str) -> bytes:
    """The object at `path` whole, its size and sha256 checked (CorruptShard on a mismatch)."""
    try:
        blob = store.read_bytes(path)
    except FileNotFoundError:
        raise _corrupt(store, path, cache, ["missing"]) from None
    problems = mismatch(blob, size, sha256)
    if problems:
        raise _corrupt(store, path, cache, problems)
    return blob


def read_checked(store: Store, path: str, size: int, sha256: str, cache: str,
                 columns: list[str] | None = None) -> pa.Table:
    """The shard at `path` read whole (one read), its size and sha256 checked, then parsed from
    memory; `cache` ("name/fingerprint") names it in the CorruptShard raised on a mismatch."""
    blob = read_bytes_checked(store, path, size, sha256, cache)
    try:
        return parse(pa.BufferReader(blob), columns)
    except pa.ArrowInvalid as exc:  # checksum matches: the writer wrote a bad file
        raise _corrupt(store, path, cache, [f"not readable as Parquet ({exc})"]) from exc


def read_unchecked(store: Store, path: str, columns: list[str] | None, cache: str,
                   filesystem: Any = None) -> pa.Table:
    """A shard's `columns` read without its checksum (verify: false, or a later pass over a
    shard read checked once), through `filesystem` (pyarrow's) or the store's: a CorruptShard
    naming the fix where it is missing or not Parquet, never a bare FileNotFoundError or
    ArrowInvalid."""
    try:
        if filesystem is not None:
            return parse(path, columns, filesystem)
        with store.fs.open(path, "rb") as f:
            return parse(f, columns)
    except FileNotFoundError:
        raise _corrupt(store, path, cache, ["missing"]) from None
    except pa.ArrowInvalid as exc:  # truncated, or not Parquet
        raise _corrupt(store, path, cache, [f"not readable as Parquet ({exc})"]) from None


def cache_label(cache_dir: str) -> str:
    """The "name/fingerprint" of a cache folder <store>/<name>/<fingerprint>."""
    return "/".join(cache_dir.rstrip("/").rsplit("/", 2)[-2:])


def shard_path(store: Store, cache_dir: str, entry: ShardEntry) -> str:
    """Where a manifest entry's file is: in the cache folder, or in the older version's folder
    it shares (raycache._cache.entry_rows)."""
    return file_path(store, cache_dir, entry)


def read_shard(store: Store, cache_dir: str, entry: ShardEntry,
               columns: list[str] | None = None, selected: bool = True) -> pa.Table:
    """A manifest entry's shard, read whole and checked (CorruptShard on a mismatch), only the
    rows its version keeps (all of the file's with `selected=False`)."""
    path = shard_path(store, cache_dir, entry)
    table = read_checked(store, path, entry.bytes, entry.sha256, cache_label(cache_dir), columns)
    return kept_of(store, path, cache_label(cache_dir), table, entry.keep, entry.file_rows) \
        if selected else table


def kept_of(store: Store, path: str, cache: str, table: pa.Table, keep: str, rows: int
            ) -> pa.Table:
    """The rows of a shard's table that its selection keeps: a CorruptShard naming the shard
    and the fix where the selection does not decode, or the file holds another number of rows
    than its entry says (never a bare ValueError, never its rows silently)."""
    try:
        return select(table, keep, rows)
    except BadSelection as exc:
        raise _corrupt(store, path, cache, [f"its entry in the shard list: {exc}"]) from None


