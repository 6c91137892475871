"""A committed cache as users see it: find it, read its manifest, look at its rows."""

from __future__ import annotations

import functools
import json
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raycache._cache.manifest import Manifest
from raycache._cache.reads import (
    THREADS,
    cache_label,
    map_ordered,
    parse,
    read_bytes_checked,
    read_shard,
    shard_path,
)
from raycache._cache.records import ShardEntry
from raycache._cache.selection import select
from raycache._cache.store import MANIFEST, Store
from raycache._cache.vectors import unpack
from raycache._errors import (
    CacheNotFound,
    CorruptCache,
    CorruptShard,
    DamagedCacheWarning,
    StoreError,
)

if TYPE_CHECKING:
    import pandas as pd
    import ray.data


@dataclass
class Cache:
    """A committed cache: its store, folder and manifest."""

    store: Store
    manifest: Manifest

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def fingerprint(self) -> str:
        return self.manifest.fingerprint

    @property
    def dir(self) -> str:
        return self.store.cache_dir(self.name, self.fingerprint)

    @property
    def uri(self) -> str:
        return self.store.url(self.dir)

    def shard_paths(self) -> list[str]:
        """Shard paths in the store's filesystem form (a shard shared with an older version is
        in that version's folder)."""
        return [shard_path(self.store, self.dir, s) for s in self.manifest.shards]

    def shard_urls(self) -> list[str]:
        return [self.store.url(p) for p in self.shard_paths()]

    def read_table(self, columns: list[str] | None = None, limit: int | None = None,
                   verify: bool = True) -> pa.Table:
        """Rows as one Arrow table, reading shards in order until `limit` rows. Each shard is
        read whole and checked against the manifest's size and sha256 (CorruptShard on a
        mismatch); verify=False reads only `columns` from each shard, unchecked."""
        def read(entry: ShardEntry) -> pa.Table:
            if verify:
                return read_shard(self.store, self.dir, entry, columns)
            with self.store.fs.open(shard_path(self.store, self.dir, entry), "rb") as f:
                return select(parse(f, columns), entry.keep, entry.file_rows)

        tables, n = [], 0
        reads = map_ordered(read, self.manifest.shards, 1 if limit else THREADS)
        for t in reads:
            tables.append(t)
            n += t.num_rows
            if limit is not None and n >= limit:
                reads.close()
                break
        if not tables:
            return pa.table({})
        table = pa.concat_tables(tables, promote_options="default")  # shards of older writers
        return table if limit is None else table.slice(0, limit)

    def to_pandas(self, columns: list[str] | None = None, limit: int | None = None,
                  verify: bool = True) -> pd.DataFrame:
        return self.read_table(columns, limit, verify).to_pandas()

    def to_ray_dataset(self, columns: list[str] | None = None) -> ray.data.Dataset:
        """The shards as a Ray Dataset, streamed from the store."""
        import ray.data

        shards = list(self.manifest.shards)
        if not any(s.keep for s in shards):
            return ray.data.read_parquet(
                self.shard_paths(), filesystem=self.store.pyarrow_fs(), columns=columns
            ).map_batches(unpack, batch_format="pyarrow", batch_size=None)
        # shards shared with a selection: each read by a task that keeps its selected rows
        items = [{"entry": json.dumps(s.to_json())} for s in shards]
        return ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _read_entries, fn_kwargs=dict(store=self.store.for_workers(), cache_dir=self.dir,
                                          columns=columns),
            batch_format="pyarrow", batch_size=1)

    def __repr__(self) -> str:
        return f"Cache({self.manifest.summary()}, uri={self.uri!r})"

    def _repr_html_(self) -> str:
        m = self.manifest
        rows = "".join(
            f"<tr><td>{e.name}</td><td>{e.kind}</td><td>{e.input}</td><td>{e.dim}</td>"
            f"<td>{e.dtype}</td></tr>"
            for e in m.encoders
        )
        return (
            f"<b>raycache</b> {m.name}/{m.fingerprint} &mdash; {m.rows} rows, "
            f"{m.shard_count} shards, labels {m.label_columns}, at <code>{self.uri}</code>"
            f"<table><tr><th>encoder</th><th>kind</th><th>input</th><th>dim</th><th>dtype</th>"
            f"</tr>{rows}</table>"
        )


def _read_entries(batch: pa.Table, store: Store, cache_dir: str, columns: list[str] | None
                  ) -> pa.Table:
    """Ray Data task: the kept rows of the shards whose entries (JSON) come in."""
    entries = [ShardEntry.from_json(json.loads(t)) for t in batch.column("entry").to_pylist()]
    return pa.concat_tables([read_shard(store, cache_dir, e, columns) for e in entries],
                            promote_options="default")


def read_manifest(store: Store, cache_dir: str) -> Manifest | None:
    """The committed manifest of a cache folder (its shard list read on first use), or None;
    CorruptCache where it cannot be read, naming the file and the fix."""
    path = f"{cache_dir}/{MANIFEST}"
    try:
        raw = store.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):  # no manifest, or not a folder at all
        return None
    except IsADirectoryError:
        raise damaged(store, cache_dir, MANIFEST, "is a folder") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # truncated, not JSON, not UTF-8
        raise damaged(store, cache_dir, MANIFEST, f"is not JSON ({exc})") from None
    try:
        return Manifest.from_dict(data, where=store.url(path),
                                  shards=functools.partial(_shard_list, store, cache_dir))
    except CorruptCache as exc:
        why = str(exc).removeprefix(exc.uri).strip().split("; fill")[0]
        raise damaged(store, cache_dir, MANIFEST, why) from None


def damaged(store: Store, cache_dir: str, rel: str, why: str) -> CorruptCache:
    """The error for a cache whose manifest or shard list (`rel`) cannot be read: the file,
    why, and the fix (a fill again, a repair, or gc's --damaged)."""
    label = cache_label(cache_dir)
    uri = store.url(f"{cache_dir}/{rel}")
    if rel == MANIFEST:
        fix = ("fill it again with the config it was filled from (the fill replaces the "
               "damaged manifest)")
        what = "its manifest"
    else:
        fix = f"re-encode it with `raycache repair {label} --store {store.uri}`"
        what = "its shard list"
    return CorruptCache(
        f"cache {label} is damaged: {what} {uri} {why}. Reads of it fail, and listings, gc "
        f"and other fills pass it by, until it is fixed: {fix}, or remove it with "
        f"`raycache gc --store {store.uri} --damaged --delete`.", uri, label)


PARSED_LISTS = 64
"""Shard lists kept parsed, by their sha256 (a list is immutable and named by its content; its
bytes are still read and checked on every open): a process that fills version after version
parses each list once."""
_PARSED: OrderedDict[str, list[ShardEntry]] = OrderedDict()


def _shard_list(store: Store, cache_dir: str, info: dict[str, Any]) -> list[ShardEntry]:
    """A format 3 manifest's shard list, checked against the size and sha256 it records
    (CorruptCache where it is missing, does not match, or holds no shard entries)."""
    rel = str(info.get("path", "shards-?.json")) if isinstance(info, dict) else "shards-?.json"
    try:
        blob = read_bytes_checked(store, f"{cache_dir}/{rel}", info["bytes"], info["sha256"],
                                  cache_label(cache_dir))
        if info["sha256"] in _PARSED:  # these very bytes were parsed before
            _PARSED.move_to_end(info["sha256"])
            return _PARSED[info["sha256"]]
        data = [ShardEntry.from_json(s) for s in json.loads(blob)]  # every entry parses
    except CorruptShard as exc:
        why = "is missing" if exc.problems == ("missing",) else (
            f"does not match the manifest's record of it: {'; '.join(exc.problems)}")
        raise damaged(store, cache_dir, rel, why) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise damaged(store, cache_dir, rel, f"is not a shard list ({type(exc).__name__}: "
                      f"{exc})") from None
    _PARSED[info["sha256"]] = data
    while len(_PARSED) > PARSED_LISTS:
        _PARSED.popitem(last=False)
    return data


def scan(store: Store | str, name: str | None = None
         ) -> tuple[list[Cache], list[StoreError]]:
    """Every committed cache in a store (or of one name), oldest first; and, apart, the errors
    of the caches whose manifest cannot be read (CorruptCache, or a format this raycache does
    not read)."""
    store = store if isinstance(store, Store) else Store(store)
    if name is None:
        store.check_folder()
    names = [name] if name else store.listdir(store.root)
    caches, bad = [], []
    for n in names:
        for fp in store.listdir(store.path(n)):
            try:
                manifest = read_manifest(store, store.cache_dir(n, fp))
            except StoreError as exc:
                bad.append(exc)
                continue
            if manifest is not None:
                caches.append(Cache(store, manifest))
    return sorted(caches, key=lambda c: (c.manifest.created, c.name)), bad


def ls(store: Store | str, name: str | None = None) -> list[Cache]:
    """Every committed cache in a store (or of one name), oldest first. A cache whose manifest
    cannot be read is left out, with one warning (DamagedCacheWarning) naming it."""
    caches, bad = scan(store, name)
    for exc in bad:
        warnings.warn(str(exc), DamagedCacheWarning, stacklevel=2)
    return caches


def open_cache(
    name: str,
    store: Store | str | None = None,
    fingerprint: str | None = None,
    **options: Any,
) -> Cache:
    """The committed cache `name` (its newest fill, or the one with `fingerprint`)."""
    from raycache._cache.config import default_store

    store = store if isinstance(store, Store) else Store(store or default_store(), options)
    if fingerprint:
        manifest = read_manifest(store, store.cache_dir(name, fingerprint))
        if manifest is None:
            raise CacheNotFound(
                f"no committed cache {name}/{fingerprint} in {store.uri!r}; `raycache ls "
                f"{store.uri}` lists what is there"
            )
        return Cache(store, manifest)
    found, bad = scan(store, name)
    if bad:  # it may be the newest: which one is, is unknown
        fps = ", ".join(f"{name}/{c.fingerprint}" for c in found) or "none"
        raise type(bad[0])(f"{bad[0]} Meanwhile {name!r} has no known newest fill; to open "
                           f"another, name its fingerprint (readable: {fps})",
                           *_fields(bad[0]))
    if not found:
        raise CacheNotFound(
            f"no committed cache named {name!r} in {store.uri!r}; fill it first, or check the "
            f"name and store (`raycache ls {store.uri}`)"
        )
    return found[-1]


def _fields(exc: StoreError) -> tuple[str, ...]:
    return (exc.uri, exc.cache) if isinstance(exc, CorruptCache) else ()
