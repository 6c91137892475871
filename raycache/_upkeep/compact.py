"""raycache compact: a committed version's sparse or small shared shards written again in its
own folder (their kept rows copied, nothing encoded), as a fill's compaction would, so reads
stay at memory speed; the version's rows and fingerprint stay the same."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from raycache._cache.config import StoreConfig
from raycache._cache.entry_rows import is_shared
from raycache._cache.finding import open_cache
from raycache._errors import RaycacheError
from raycache._fill.plan import plan
from raycache._fill.run import FillResult, complete
from raycache._fill.versions import compaction, within
from raycache._upkeep.repair import config_of, own_records

__all__ = ["compact"]


def compact(name: str, store: StoreConfig | str | None = None, fingerprint: str | None = None, *,
            below: float | None = None, source_options: dict[str, Any] | None = None,
            progress: bool = True, trust_code: bool | Sequence[str] = False) -> FillResult:
    """Compact a cache version: its sparse or small shared shards written again in its folder.

    The shared shards that keep less than `below` of their rows, and the small ones once they
    outnumber the bound a fill keeps to, have their kept rows copied into shards of the
    cache's own folder: nothing is read from the source or encoded, but the source is still
    listed and must be unchanged, as for a repair (the fingerprint is checked). The shards it
    stops reading stay for the versions that still read them; gc removes them once none does.

    Args:
        name: The cache's name.
        store: The store: its URI or a StoreConfig (or an opened one, `Cache.store`;
            $RAYCACHE_STORE, else .raycache/store, when None).
        fingerprint: Compact this version rather than the newest.
        below: Compact shards keeping less than this fraction of their rows (None: the fill's
            compact_below, 0.9).
        source_options: fsspec storage options for the source (never recorded in the cache).
        progress: Show the progress bar and summary.
        trust_code: Let the manifest name code to run (a torch encoder's factory): True for
            any, or the allowed prefixes; False: only what this process's own configs named.

    Returns:
        The result, as a fill's: a hit where there was nothing to compact.

    Raises:
        RaycacheError: The source or encoders changed since the fill (fill it again instead).
        CacheNotFound: No committed cache of that name (or fingerprint) is in the store.
        CorruptCache: Its manifest cannot be read (fill it again).
        SourceError: The source it was filled from cannot be read as it was.
        EncoderError: An encoder cannot be built or run.
        UntrustedCode: The manifest names code that trust_code does not allow.
        StoreError: The store cannot be reached or written (StoreUnavailable: after its
            retries; run it again).

    Example:
        ```python
        result = raycache.compact("docs", below=0.5)
        print(result.summary())
        ```
    """
    started = time.perf_counter(), time.time()
    cache = open_cache(name, store, fingerprint)
    cfg = config_of(cache, source_options or {}, progress, "auto", trust_code)
    if below is not None:
        cfg = dataclasses.replace(cfg, compact_below=below)
    p = plan(cfg)
    if p.fingerprint != cache.fingerprint:
        raise RaycacheError(
            f"cannot compact {cache.name}/{cache.fingerprint}: its source or encoders changed "
            f"since the fill (they now give fingerprint {p.fingerprint}). Fill the cache "
            "again instead: the new version shares what is still valid, and compacts")
    m = cache.manifest
    keep, sparse = compaction(p, [e for e in m.shards if is_shared(e)], budget=1.0)
    if not sparse:
        return FillResult(cache, True, time.perf_counter() - started[0], 0, compaction=True)
    version = within(p, m, keep, sparse)
    result = complete(p, own_records(cache, set()), replace=True, started=started,
                      version=version)
    result.repair, result.compaction = False, True  # its summary says what it did
    return result
