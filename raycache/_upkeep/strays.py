"""Stray files of a committed cache: files in its folder that its manifest does not name.

A fill that was abandoned or lost a race, a repair cut short, or an older shard list can leave
them. Reads go through the manifest, so they never change what a cache returns; they only take
space. `raycache verify` lists them and `raycache gc` removes them once past its grace.
"""

from __future__ import annotations

from collections.abc import Collection

from raycache._cache.committed import Cache
from raycache._cache.entry_rows import is_shared
from raycache._cache.lease import LEASES
from raycache._cache.manifests import read_manifest
from raycache._cache.outside import KEPT_ROWS
from raycache._cache.store import MANIFEST, RUNS
from raycache._errors import StoreError
from raycache._upkeep.refs import references

__all__ = ["read_by_others", "strays"]


def strays(cache: Cache, referenced: Collection[str] = ()) -> dict[str, tuple[int, float]]:
    """Every file under the cache folder, outside runs/ and _leases/, that neither the manifest
    nor `referenced` (paths relative to the folder that other versions read: format 5 shares)
    names: path relative to the folder -> (bytes, modification time in seconds since the
    epoch). A shard the manifest shares from another folder is that folder's, never named
    here."""
    m = cache.manifest
    named = {MANIFEST, *(e.path for e in m.shards if not is_shared(e)), *referenced}
    if m.shard_list:
        named.add(m.shard_list["path"])
    if isinstance(kept := m.extra.get(KEPT_ROWS), dict):  # the rows outside readers join
        named.add(kept.get("path"))
    out = {}
    for path, info in cache.store.files(cache.dir).items():
        rel = path[len(cache.dir) + 1:]
        if rel not in named and not rel.startswith((f"{RUNS}/", f"{LEASES}/")):
            out[rel] = info
    return dict(sorted(out.items()))


def read_by_others(cache: Cache) -> set[str]:
    """Files of the cache's folder that the other committed versions of its name read (format
    5 shares), paths relative to the folder; a version that cannot be read names none."""
    store, me = cache.store, f"{cache.name}/{cache.fingerprint}"
    others = []
    for fp in store.listdir(store.path(cache.name)):
        if fp != cache.fingerprint:
            try:
                if (m := read_manifest(store, store.cache_dir(cache.name, fp))) is not None:
                    others.append(m)
            except StoreError:  # damaged or newer: verify of that one says so
                continue
    return set(references(others).get(me, {}))
