"""Stray files of a committed cache: files in its folder that its manifest does not name.

A fill that was abandoned or lost a race, a repair cut short, or an older shard list can leave
them. Reads go through the manifest, so they never change what a cache returns; they only take
space. `raycache verify` lists them and `raycache gc` removes them once past its grace.
"""

from __future__ import annotations

from raycache.cache.committed import Cache
from raycache.cache.lease import LEASES
from raycache.cache.store import MANIFEST, RUNS

__all__ = ["strays"]


def strays(cache: Cache) -> dict[str, tuple[int, float]]:
    """Every file under the cache folder, outside runs/ and _leases/, that the manifest does
    not name: path relative to the folder -> (bytes, modification time in seconds since the
    epoch)."""
    m = cache.manifest
    named = {MANIFEST, *(e.path for e in m.shards)}
    if m.shard_list:
        named.add(m.shard_list["path"])
    out = {}
    for path, info in cache.store.files(cache.dir).items():
        rel = path[len(cache.dir) + 1:]
        if rel not in named and not rel.startswith((f"{RUNS}/", f"{LEASES}/")):
            out[rel] = info
    return dict(sorted(out.items()))
