"""FILL: plan, encode, commit. The plan (raycache._fill.plan) checks the config and names the
cache; a hit ends there. Otherwise the fill's steps run in order: what the version shares with
an older one and what an interrupted run left (raycache._fill.shared), the rows still to read;
encode them, on Ray Data or in this process (raycache._fill.encode); check that every row is in
one shard, scan keys and labels, and commit the manifest (raycache._fill.commit)."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from raycache._cache.committed import Cache
from raycache._cache.lease import Lease
from raycache._cache.manifests import read_manifest
from raycache._cache.records import ShardRecord
from raycache._compute import where
from raycache._core.caller import warn
from raycache._core.transient import is_transient
from raycache._core.trust import vouch
from raycache._errors import (
    CorruptCache,
    DamagedCacheWarning,
    RaycacheError,
    SourceError,
    StoreError,
    StoreUnavailable,
)
from raycache._fill.commit import check_complete, commit, resumable
from raycache._fill.config import FillConfig
from raycache._fill.encode import Encoded, encode
from raycache._fill.plan import Plan, load_config, plan
from raycache._fill.result import FillResult
from raycache._fill.shared import Resumed, Shares, Whole
from raycache._source import files as sources

if TYPE_CHECKING:
    from raycache._fill.shared import Version

__all__ = ["FillResult", "complete", "fill"]


def fill(config: FillConfig | dict | str, *, progress: bool | None = None) -> FillResult:
    """Fill the cache `config` describes, or find it committed already (a hit).

    Args:
        config: A FillConfig, a dict of its fields, or a YAML file's path.
        progress: Show the progress bar and summary (None: as `config.progress` says).

    Returns:
        The committed cache, hit or miss, the rows encoded, reused and resumed, the timings.

    Raises:
        ConfigError: Every problem of the config, or against the source's columns, at once.
        SourceError: The source cannot be read as asked (no files, a file unreadable, changed).
        RaycacheError: Keys held twice, with source.duplicates: error (a few listed).
        EncoderError: An encoder cannot be built or run, or a row cannot be encoded.
        FingerprintError: An input of the cache key cannot be described stably.
        StoreError: The store cannot be written (StoreUnavailable: run it again, it resumes).

    Example:
        ```python
        result = raycache.fill("fill.yaml")
        ```
    """
    started = time.perf_counter(), time.time()  # the plan (encoder digests) counts too
    cfg = load_config(config)
    vouch(e.factory for e in cfg.encoders)  # the user's own code: load_head may run it here
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    p = plan(cfg)
    try:
        manifest = read_manifest(p.store, p.dir)
    except CorruptCache as exc:  # the config says what it holds: fill it again, over it
        warn(f"{exc}. Filling it again now, from this config", DamagedCacheWarning)
        return complete(p, resumable(p), replace=True)
    if manifest is not None and manifest.skipped:  # rows it skipped (on_bad_rows: skip)
        return _retry(p, Cache(p.store, manifest), started)
    if manifest is not None:
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - started[0], 0)

    return complete(p, resumable(p), started=started)


def _retry(p: Plan, cache: Cache, started: tuple[float, float]) -> FillResult:
    """A cache's skipped rows filled again over it, its shards kept, label counts redone."""
    from raycache._fill.retry import own_records

    result = complete(p, own_records(cache, set()), replace=True, started=started)
    result.repair, result.retried = False, len(cache.manifest.skipped)
    return result


def complete(p: Plan, done: list[ShardRecord], *, replace: bool = False,
             started: tuple[float, float] | None = None, version: Version | None = None
             ) -> FillResult:
    """Encode the rows the records `done` lack, check, commit (`replace`: over a manifest, a
    repair; `started`: (perf_counter, time); `version`: default planned); leased against gc."""
    with Lease(p.store, p.dir) as lease:
        try:
            return _complete(p, done, replace, lease, started, version)
        except Exception as exc:
            if not isinstance(exc, StoreError) and lease.lost:  # (a failed store: not asked)
                raise _removed(p) from exc
            if not isinstance(exc, RaycacheError) and is_transient(exc):  # past the retries
                raise StoreUnavailable(
                    f"fill {p.cfg.name}/{p.fingerprint}: the store or the source's object store "
                    f"kept failing after its retries ({type(exc).__name__}: {exc}); nothing "
                    "was committed. Run it again: it resumes at its last written shard"
                ) from exc
            raise


def _removed(p: Plan) -> StoreError:
    return StoreError(
        f"the folder of the fill {p.cfg.name}/{p.fingerprint} ({p.store.url(p.dir)}) was removed "
        "while the fill ran (by `raycache gc` or by hand), with the shards it had written; "
        "nothing was committed. Run the fill again: it starts over"
    )


def _complete(p: Plan, done: list[ShardRecord], replace: bool, lease: Lease,
              started: tuple[float, float] | None, version: Version | None) -> FillResult:
    """The fill's steps: what the version shares, what is resumed, the units left to read;
    encode them; check, scan the keys and commit."""
    cfg = p.cfg
    start, start_wall = started or (time.perf_counter(), time.time())
    cluster = where.look_ahead(cfg.in_process is False)  # beside the version's plan
    shares = version or _shares(p, replace)
    resumed = shares.resume(p, done)  # a resumed record never holds a row the version shares
    units, totals = sources.plan_units(p.files, p.format, cfg.source.options, cfg.rows_per_shard,
                                       resumed.covered, cfg.source.key, shares.totals)
    if not sum(totals.values()):
        _no_rows(p)  # before any work
    encoded = encode(p, units, shares, cluster, start)
    return _commit(p, shares, resumed, encoded, totals, replace, lease, start, start_wall)


def _shares(p: Plan, replace: bool) -> Shares:
    """What the fill's version shares with an older one, planned: nothing for a fill over a
    manifest (`replace`; a repair passes its version), nor with `share: false`, nor where no
    older version fits."""
    from raycache._fill.versions import plan_version

    return (plan_version(p) if p.cfg.share and not replace else None) or Whole()


def _commit(p: Plan, shares: Shares, resumed: Resumed, encoded: Encoded, totals: dict[str, int],
            replace: bool, lease: Lease, start: float, start_wall: float) -> FillResult:
    """Every row in one shard, the keys and labels scanned, the source unchanged, the manifest
    written; another fill of this cache that committed first is the result."""
    records = resumed.records + encoded.new
    check_complete(p, records, totals, shares.carried, encoded.skipped)
    if not sum(r.rows for r in records) + shares.rows:
        _no_rows(p)  # never an empty cache committed
    try:
        records, label_stats = shares.keys(p, records, not encoded.local, encoded.summaries)
    except FileNotFoundError:  # another fill of this cache committed, its rewrites replacing
        manifest = read_manifest(p.store, p.dir)  # shards this one wrote too: its result
        if manifest is None or replace:
            raise
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    sources.check_unchanged(p.files, p.cfg.source.options, "nothing was committed")
    if lease.lost:  # never a manifest over a folder whose shards went
        raise _removed(p)
    manifest, committed = commit(p, records, time.perf_counter() - start, replace, label_stats,
                                 shares.carried, shares.dims, encoded.skipped)
    if not committed:  # another fill of this cache committed first: that cache is the result
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    began = encoded.began
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start,
                      encoded.encoded, resumed_rows=resumed.resumed_rows,
                      reused_rows=encoded.reused, first_shard_seconds=encoded.first,
                      encode_seconds=encoded.seconds, pool=encoded.pool,
                      encoded_by=encoded.encoded_by(p.cfg), repair=replace,
                      startup_seconds=began - start_wall if began else 0.0,
                      shared_rows=shares.rows,
                      compacted_rows=sum(r.rows for r in resumed.compacted),
                      base=shares.base_fingerprint(p),
                      written_bytes=sum(r.bytes for r in encoded.new + resumed.compacted))


def _no_rows(p: Plan) -> None:
    raise SourceError(
        f"source {p.cfg.source.path!r} holds no rows (in {len(p.files)} file(s)): a cache of "
        f"no rows would train nothing, so fill {p.cfg.name!r} commits none. Point "
        "source.path at files that hold rows")
