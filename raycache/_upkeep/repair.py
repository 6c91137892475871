"""Repair: re-encode only a committed cache's bad or missing shards from its unchanged source,
and commit a corrected manifest."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.config import StoreConfig
from raycache._cache.confined import path_problem
from raycache._cache.entry_rows import is_shared, label
from raycache._cache.finding import open_cache
from raycache._core.trust import Trust
from raycache._encoders.config import EncoderConfig
from raycache._encoders.trusted import check_encoders
from raycache._errors import RaycacheError
from raycache._fill.config import FillConfig, ViewsConfig
from raycache._fill.plan import plan
from raycache._fill.retry import own_records
from raycache._fill.run import FillResult, complete
from raycache._fill.versions import within
from raycache._source.config import SourceConfig

__all__ = ["config_of", "own_records", "remove_bad", "repair"]


def repair(name: str, store: StoreConfig | str | None = None, fingerprint: str | None = None, *,
           source_options: dict[str, Any] | None = None, progress: bool = True,
           in_process: bool | str = "auto", trust_code: bool | Sequence[str] = False
           ) -> FillResult:
    """Verify a cache and re-encode only the shards that fail, from its unchanged source.

    All shards are re-encoded where its shard list cannot be read (which rows each holds is
    not known without it). A version that shares older versions' shards (format 5) keeps the
    good ones as they are; the rows of a bad or missing one are encoded again into its own
    folder.

    Args:
        name: The cache's name.
        store: The store: its URI or a StoreConfig (or an opened one, `Cache.store`;
            $RAYCACHE_STORE, else .raycache/store, when None).
        fingerprint: Repair this version rather than the newest.
        source_options: fsspec storage options for the source (never recorded in the cache).
        progress: Show the progress bar and summary.
        in_process: The fill's setting of that name: encode in this process, on Ray, or auto.
        trust_code: Let the manifest name code to run (a torch encoder's factory): True for
            any, or the allowed prefixes; False: only what this process's own configs named.

    Returns:
        The result, as a fill's, its summary saying repair: a hit where every shard passed.

    Raises:
        RaycacheError: The source or encoders changed since the fill (fill it again instead:
            content reuse encodes only what changed).
        CacheNotFound: No committed cache of that name (or fingerprint) is in the store.
        CorruptCache: Its manifest cannot be read (fill it again).
        SourceError: The source it was filled from cannot be read as it was.
        EncoderError: An encoder cannot be built or run.
        UntrustedCode: The manifest names code that trust_code does not allow.
        StoreError: The store cannot be reached or written (StoreUnavailable: after its
            retries; run it again).

    Example:
        ```python
        result = raycache.repair("docs")
        print(result.summary())
        ```
    """
    from raycache._upkeep.verify import verify

    started = time.perf_counter(), time.time()  # the verify counts in the repair's time
    cache = open_cache(name, store, fingerprint)
    report = verify(cache)
    if report.ok:
        return FillResult(cache, True, time.perf_counter() - started[0], 0, repair=True)
    p = plan(config_of(cache, source_options or {}, progress, in_process, trust_code))
    if p.fingerprint != cache.fingerprint:
        raise RaycacheError(
            f"cannot repair {cache.name}/{cache.fingerprint}: its source or encoders changed "
            f"since the fill (they now give fingerprint {p.fingerprint}). Fill the cache again "
            "instead; content reuse encodes only what changed"
        )
    if cache.manifest.shard_list.get("path") in report.bad:  # a damaged shard list
        return complete(p, [], replace=True)
    bad = set(report.bad)
    remove_bad(cache, bad)  # never reused, never adopted: re-encoded instead
    shared = [e for e in cache.manifest.shards if is_shared(e) and label(e) not in bad]
    version = within(p, cache.manifest, shared) if any(map(is_shared, cache.manifest.shards)) \
        else None  # a bad shared file stays (other versions may read it): its rows are
    return complete(p, own_records(cache, bad), replace=True, started=started,  # encoded anew
                    version=version)


def remove_bad(cache: Cache, bad: set[str]) -> None:
    """Remove the version's own shard files that verify found `bad`: each one file of its
    folder's shards/, never a folder, a file another version shares, or a path out of it."""
    for e in cache.manifest.shards:
        if is_shared(e) or label(e) not in bad or path_problem(e.path):
            continue
        path = f"{cache.dir}/{e.path}"
        try:
            cache.store.rm_file(path)
        except FileNotFoundError:
            continue
        except IsADirectoryError as exc:
            raise RaycacheError(
                f"cannot repair {cache.name}/{cache.fingerprint}: its shard "
                f"{cache.store.url(path)} is a folder, not a file; move it away and run the "
                "repair again") from exc


def config_of(cache: Cache, source_options: dict[str, Any], progress: bool,
              in_process: bool | str, trust_code: bool | Sequence[str] = False) -> FillConfig:
    """The fill config a manifest was committed from (store and source options apart, which
    are never recorded), its encoders' code checked against `trust_code` (UntrustedCode)."""
    m = cache.manifest
    check_encoders(m.extra.get("encoder_configs", {}), Trust.of(trust_code),
                   f"{cache.dir}/manifest.json: encoder_configs")
    source = m.inputs["source"]
    encoders = [EncoderConfig(**c) for c in m.extra["encoder_configs"].values()]
    return FillConfig(
        name=m.name,
        source=SourceConfig(path=[f["uri"] for f in source["files"]], format=source["format"],
                            key=source["key"], labels=list(source["labels"]),
                            options=source_options,
                            duplicates=source.get("duplicates", "error")),
        encoders=encoders,
        store=StoreConfig(uri=cache.store.uri, options=cache.store.options,
                          shared=cache.store.shared, timeout_s=cache.store.timeout_s),
        rows_per_shard=m.inputs["rows_per_shard"],
        views=ViewsConfig(**m.inputs["views"]) if m.inputs.get("views") else None,
        in_process=in_process,
        progress=progress,
    )
