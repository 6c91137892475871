"""Committed caches found in a store: every version of a name in its history's order, the
listing users see (`ls`), and one opened by name (`open_cache`)."""

from __future__ import annotations

from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.config import StoreConfig
from raycache._cache.manifests import read_manifest
from raycache._cache.opened import opened
from raycache._cache.order import history
from raycache._cache.store import Store
from raycache._core.caller import warn
from raycache._errors import CacheNotFound, CorruptCache, DamagedCacheWarning, StoreError

__all__ = ["ls", "open_cache", "scan"]


def scan(store: StoreConfig | Store | str, name: str | None = None
         ) -> tuple[list[Cache], list[StoreError]]:
    """Every committed cache in a store (or of one name), oldest first (each name's versions in
    the order of their first commits, raycache._cache.order); and, apart, the errors
    of the caches whose manifest cannot be read (CorruptCache, or a format this raycache does
    not read)."""
    store = opened(store)
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


def ls(store: StoreConfig | str, name: str | None = None) -> list[Cache]:
    """Every committed cache in a store (or of one name), oldest first.

    A cache whose manifest cannot be read is left out, with one warning (DamagedCacheWarning)
    naming it.

    Args:
        store: The store: its URI (a folder, s3://bucket/prefix) or a StoreConfig (or an
            opened one, `Cache.store`).
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
        warn(str(exc), DamagedCacheWarning)
    return caches


def open_cache(
    name: str,
    store: StoreConfig | str | None = None,
    fingerprint: str | None = None,
    **options: Any,
) -> Cache:
    """The committed cache `name`: its newest fill, or the one with `fingerprint`.

    Args:
        name: The cache's name (the fill config's `name`).
        store: The store: its URI or a StoreConfig (or an opened one, `Cache.store`;
            $RAYCACHE_STORE, else .raycache/store, when None).
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
    store = opened(store, options)
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
