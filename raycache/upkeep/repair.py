"""Repair: re-encode only a committed cache's bad or missing shards from its unchanged source,
and commit a corrected manifest."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from raycache.cache.committed import Cache, open_cache
from raycache.cache.config import StoreConfig
from raycache.cache.records import RowRange, ShardRecord
from raycache.cache.store import MANIFEST, Store
from raycache.encoders.config import EncoderConfig
from raycache.errors import RaycacheError
from raycache.fill.config import FillConfig, ViewsConfig
from raycache.fill.plan import plan
from raycache.fill.run import FillResult, complete
from raycache.source.config import SourceConfig
from raycache.source.files import SourceFile

if TYPE_CHECKING:
    from raycache.upkeep.verify import Report

__all__ = ["repair"]


def repair(name: str, store: Store | str | None = None, fingerprint: str | None = None, *,
           source_options: dict[str, Any] | None = None, progress: bool = True,
           in_process: bool | str = "auto") -> FillResult:
    """Verify the cache `name` (its newest fill, or `fingerprint`) and re-encode the shards that
    fail (all of them where its shard list cannot be read: which rows each holds is not known
    without it); a cache that passes is left as it is (returned as a hit); the result's summary
    says repair. The source must be the one the cache was filled from, unchanged;
    `source_options` are its fsspec options, and `in_process` is the fill's setting of that
    name. A version that shares older versions' shards (format 5) is refused: fill it again
    (the error says how)."""
    from raycache.upkeep.verify import verify

    started = time.perf_counter(), time.time()  # the verify counts in the repair's time
    cache = open_cache(name, store, fingerprint)
    report = verify(cache)
    if report.ok:
        return FillResult(cache, True, time.perf_counter() - started[0], 0, repair=True)
    _refuse_shared(cache, report)
    p = plan(_config(cache, source_options or {}, progress, in_process))
    if p.fingerprint != cache.fingerprint:
        raise RaycacheError(
            f"cannot repair {cache.name}/{cache.fingerprint}: its source or encoders changed "
            f"since the fill (they now give fingerprint {p.fingerprint}). Fill the cache again "
            "instead; content reuse encodes only what changed"
        )
    if cache.manifest.shard_list.get("path") in report.bad:  # a damaged shard list
        return complete(p, [], replace=True)
    bad = set(report.bad)
    for path in bad:  # never reused, never adopted: the re-encoded shard replaces it
        with contextlib.suppress(FileNotFoundError):
            cache.store.rm(f"{cache.dir}/{path}")
    return complete(p, _records(cache, bad), replace=True, started=started)


def _refuse_shared(cache: Cache, report: Report) -> None:
    """A version that shares an older version's shards (format 5) is not repaired yet: a
    repair commits only shards of the cache's own folder, and would drop the shared ones (or
    lose them where they are the bad ones). RaycacheError naming the bad shards and the fix."""
    m = cache.manifest
    if m.shard_list.get("path") in report.bad or not any(e.home for e in m.shards):
        return  # a damaged shard list is filled again whole, in the cache's own folder
    me = f"{cache.name}/{cache.fingerprint}"
    bad = [f"{path} ({'; '.join(why)})" for path, why in report.bad.items()]
    raise RaycacheError(
        f"cannot repair {me}: it shares shard files of older versions (format 5), and repair "
        f"does not yet keep shared shards; bad: {', '.join(bad)}. Fill it again instead: "
        f"remove its manifest {cache.store.url(f'{cache.dir}/{MANIFEST}')} (its shard files "
        "stay: other versions may read them) and run `raycache fill` with the config it was "
        "filled from, which encodes its rows again, reusing the embeddings the store's other "
        "caches hold"
    )


def _config(cache: Cache, source_options: dict[str, Any], progress: bool,
            in_process: bool | str) -> FillConfig:
    """The fill config a manifest was committed from (store and source options apart, which
    are never recorded)."""
    m = cache.manifest
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


def _records(cache: Cache, bad: set[str]) -> list[ShardRecord]:
    """The good shards as the fill's shard records: what a resumed fill keeps."""
    m = cache.manifest
    uri = {SourceFile(f["uri"], f["size"], f["version"]).block: f["uri"]
           for f in m.inputs["source"]["files"]}
    total: dict[str, int] = {}
    for s in m.shards:
        for r in s.ranges:
            total[r.block] = max(total.get(r.block, 0), r.stop)
    dims = {e.name: e.dim for e in m.encoders}
    return [ShardRecord(s.path, s.rows, s.bytes, s.sha256, dims=dims,
                        ranges=tuple(RowRange(r.block, r.start, r.stop, uri[r.block],
                                              total[r.block]) for r in s.ranges))
            for s in m.shards if s.path not in bad]
