"""A committed cache as users see it: find it, read its manifest, look at its rows."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raycache._cache.manifest import Manifest
from raycache._cache.manifests import read_manifest
from raycache._cache.order import history
from raycache._cache.outside import KEPT_ROWS, kept_rows, read_whole
from raycache._cache.reads import (
    THREADS,
    kept_of,
    map_ordered,
    read_shard,
    read_unchecked,
    shard_path,
)
from raycache._cache.records import ShardEntry
from raycache._cache.store import Store
from raycache._cache.vectors import unpack
from raycache._errors import (
    CacheNotFound,
    CorruptCache,
    DamagedCacheWarning,
    StoreError,
)

if TYPE_CHECKING:
    import pandas as pd
    import ray.data


@dataclass
class Cache:
    """A committed cache: its store, folder and manifest (from `open_cache` or `ls`).

    Example:
        ```python
        cache = raycache.open_cache("docs")
        cache.manifest.rows, cache.uri
        df = cache.to_pandas(limit=100)
        ```
    """

    store: Store
    """The store that holds the cache."""
    manifest: Manifest
    """Its manifest: encoders, columns, rows and shards."""

    @property
    def name(self) -> str:
        """The cache's name (the fill config's `name`)."""
        return self.manifest.name

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the fill's inputs that names this version."""
        return self.manifest.fingerprint

    @property
    def dir(self) -> str:
        """The cache's folder, in the store's filesystem form (`<store>/<name>/<fingerprint>`)."""
        return self.store.cache_dir(self.name, self.fingerprint)

    @property
    def uri(self) -> str:
        """The cache's folder as a URI (a local path, or s3://...)."""
        return self.store.url(self.dir)

    def shard_paths(self) -> list[str]:
        """Shard paths in the store's filesystem form.

        Returns:
            One path per shard, in the manifest's order (a shard shared with an older version
            is in that version's folder).

        Example:
            ```python
            paths = raycache.open_cache("docs").shard_paths()
            ```
        """
        return [shard_path(self.store, self.dir, s) for s in self.manifest.shards]

    def shard_urls(self) -> list[str]:
        """URLs of the shard files this version reads whole, for readers outside raycache.

        A version that shares an older version's file in part (format 5: rows edited or
        removed since) reads only some of its rows: those files are not here, but in
        `kept_rows()` (and the Parquet at `kept_rows_url()`), one row per row it reads. These
        files read whole, plus the kept rows of those, are exactly the version's rows
        (docs/format.md, "Reading a cache by hand").

        Returns:
            One URL per shard file read whole, in the manifest's order.

        Example:
            ```python
            urls = raycache.open_cache("docs").shard_urls()
            ```
        """
        return [self.store.url(shard_path(self.store, self.dir, s))
                for s in read_whole(self.manifest.shards)]

    def kept_rows(self) -> pa.Table:
        """The rows this version reads from the shard files it reads in part, for readers
        outside raycache: join them with the files' row numbers (DuckDB's
        `file_row_number`, Polars' `row_index`).

        Returns:
            A table of `file` (the file's URL) and `row` (0-based, in the file), one row per
            row the version reads from it; no rows where it reads every file whole.

        Raises:
            CorruptCache: The shard list cannot be read.
            CorruptShard: A row selection does not fit its file.

        Example:
            ```python
            kept = raycache.open_cache("docs").kept_rows()
            partial = sorted(set(kept.column("file").to_pylist()))
            ```
        """
        return kept_rows(self.name, self.fingerprint, self.manifest.shards,
                         self.store.url(self.store.root) + "/")

    def kept_rows_url(self) -> str | None:
        """The URL of this version's kept-rows list, a Parquet file of (`file`, `row`) with
        `file` relative to the store root (`<name>/<fingerprint>/shards/...`): the same rows
        as `kept_rows()`, for readers without raycache.

        Returns:
            Its URL; None where the version reads every file whole, or was committed by a
            raycache before 0.6 (use `kept_rows()`).

        Example:
            ```python
            url = raycache.open_cache("docs").kept_rows_url()
            ```
        """
        rec = self.manifest.extra.get(KEPT_ROWS)
        return self.store.url(f"{self.dir}/{rec['path']}") if isinstance(rec, dict) else None

    def read_table(self, columns: list[str] | None = None, limit: int | None = None,
                   verify: bool = True) -> pa.Table:
        """Rows as one Arrow table, reading shards in order until `limit` rows.

        Args:
            columns: The columns to read (all of them when None).
            limit: Stop after this many rows (all rows when None).
            verify: Read each shard whole and check it against the manifest's size and sha256;
                False reads only `columns` from each shard, unchecked.

        Returns:
            The rows, in shard order; embeddings as fixed-size list columns.

        Raises:
            CorruptShard: A shard is missing or does not match the manifest (with `verify`).
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            table = raycache.open_cache("docs").read_table(["id", "label"], limit=1000)
            ```
        """
        def read(entry: ShardEntry) -> pa.Table:
            if verify:
                return read_shard(self.store, self.dir, entry, columns)
            path, label = shard_path(self.store, self.dir, entry), f"{self.name}/{self.fingerprint}"
            table = read_unchecked(self.store, path, columns, label)
            return kept_of(self.store, path, label, table, entry.keep, entry.file_rows)

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
        """Rows as a pandas DataFrame: `read_table(...).to_pandas()`.

        Args:
            columns: The columns to read (all of them when None).
            limit: Stop after this many rows (all rows when None).
            verify: Check each shard against the manifest's size and sha256.

        Returns:
            The rows, in shard order; an embedding is one numpy array per row.

        Raises:
            CorruptShard: A shard is missing or does not match the manifest (with `verify`).
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            df = raycache.open_cache("docs").to_pandas(limit=100)
            ```
        """
        return self.read_table(columns, limit, verify).to_pandas()

    def to_ray_dataset(self, columns: list[str] | None = None) -> ray.data.Dataset:
        """The shards as a Ray Dataset, streamed from the store (imports Ray).

        Args:
            columns: The columns to read (all of them when None).

        Returns:
            A lazy Ray Dataset over the cache's rows; shards are read when it is consumed.

        Example:
            ```python
            ds = raycache.open_cache("docs").to_ray_dataset(["id", "minilm"])
            ds.count()
            ```
        """
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


def scan(store: Store | str, name: str | None = None
         ) -> tuple[list[Cache], list[StoreError]]:
    """Every committed cache in a store (or of one name), oldest first (each name's versions in
    the order of their first commits, raycache._cache.order); and, apart, the errors
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
    return history(caches, lambda c: c.name, lambda c: c.manifest.place), bad


def ls(store: Store | str, name: str | None = None) -> list[Cache]:
    """Every committed cache in a store (or of one name), oldest first.

    A cache whose manifest cannot be read is left out, with one warning (DamagedCacheWarning)
    naming it.

    Args:
        store: The store: a Store, or its URI (a folder, s3://bucket/prefix).
        name: Only the versions of this cache (every cache when None).

    Returns:
        The committed caches, oldest first.

    Raises:
        StoreError: The store's URI names a file, not a folder, or the store cannot be read.
        StoreUnavailable: The store kept failing after its client's retries.

    Example:
        ```python
        for cache in raycache.ls(".raycache/store"):
            print(cache.name, cache.fingerprint, cache.manifest.rows)
        ```
    """
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
    """The committed cache `name`: its newest fill, or the one with `fingerprint`.

    Args:
        name: The cache's name (the fill config's `name`).
        store: The store: a Store, or its URI ($RAYCACHE_STORE, else .raycache/store, when
            None).
        fingerprint: Open this version rather than the newest.
        **options: fsspec storage options for a store given as a URI (credentials are used,
            never written or shown).

    Returns:
        The cache, its manifest read (its shard list on first use).

    Raises:
        CacheNotFound: No committed cache of that name (or fingerprint) is in the store.
        CorruptCache: The manifest of the asked version, or of any version of `name` when no
            fingerprint is given, cannot be read; the message names it and the fix.
        StoreError: The store's URI is a temporary folder or a file, or cannot be read.
        StoreUnavailable: The store kept failing after its client's retries.

    Example:
        ```python
        cache = raycache.open_cache("docs")
        oldest = raycache.ls(".raycache/store", "docs")[0]
        first = raycache.open_cache("docs", fingerprint=oldest.fingerprint)
        ```
    """
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
