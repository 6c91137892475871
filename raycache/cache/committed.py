"""A committed cache as users see it: find it, read its manifest, look at its rows."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycache.cache.manifest import Manifest
from raycache.cache.reads import THREADS, map_ordered, read_shard
from raycache.cache.records import ShardEntry
from raycache.cache.store import MANIFEST, Store
from raycache.errors import CacheNotFound

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
        """Shard paths in the store's filesystem form."""
        return [f"{self.dir}/{s.path}" for s in self.manifest.shards]

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
            with self.store.fs.open(f"{self.dir}/{entry.path}", "rb") as f:
                return pq.read_table(f, columns=columns)

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

        return ray.data.read_parquet(
            self.shard_paths(), filesystem=self.store.pyarrow_fs(), columns=columns
        )

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


def read_manifest(store: Store, cache_dir: str) -> Manifest | None:
    """The committed manifest of a cache folder (its shard list read on first use), or None."""
    path = f"{cache_dir}/{MANIFEST}"
    try:
        data = store.read_json(path)
    except (FileNotFoundError, NotADirectoryError):  # no manifest, or not a folder at all
        return None
    return Manifest.from_dict(data, where=store.url(path),
                              shards=functools.partial(_shard_list, store, cache_dir))


def _shard_list(store: Store, cache_dir: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    """A format 3 manifest's shard list, checked against the size and sha256 it records."""
    from raycache.cache.reads import cache_label, read_bytes_checked

    return json.loads(read_bytes_checked(store, f"{cache_dir}/{info['path']}", info["bytes"],
                                         info["sha256"], cache_label(cache_dir)))


def ls(store: Store | str, name: str | None = None) -> list[Cache]:
    """Every committed cache in a store (or of one name), oldest first."""
    store = store if isinstance(store, Store) else Store(store)
    names = [name] if name else store.listdir(store.root)
    caches = []
    for n in names:
        for fp in store.listdir(store.path(n)):
            manifest = read_manifest(store, store.cache_dir(n, fp))
            if manifest is not None:
                caches.append(Cache(store, manifest))
    return sorted(caches, key=lambda c: (c.manifest.created, c.name))


def open_cache(
    name: str,
    store: Store | str | None = None,
    fingerprint: str | None = None,
    **options: Any,
) -> Cache:
    """The committed cache `name` (its newest fill, or the one with `fingerprint`)."""
    from raycache.cache.config import default_store

    store = store if isinstance(store, Store) else Store(store or default_store(), options)
    if fingerprint:
        manifest = read_manifest(store, store.cache_dir(name, fingerprint))
        if manifest is None:
            raise CacheNotFound(
                f"no committed cache {name}/{fingerprint} in {store.uri!r}; `raycache ls "
                f"{store.uri}` lists what is there"
            )
        return Cache(store, manifest)
    found = ls(store, name)
    if not found:
        raise CacheNotFound(
            f"no committed cache named {name!r} in {store.uri!r}; fill it first, or check the "
            f"name and store (`raycache ls {store.uri}`)"
        )
    return found[-1]
