"""FILL: read the source, prepare and encode it in Ray Data stages (or, for a small CPU fill,
the same stages in this process), write shards, commit."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache
from raycache._cache.lease import Lease
from raycache._cache.manifests import read_manifest
from raycache._cache.records import ShardRecord, SkippedRow
from raycache._compute import runner, where
from raycache._compute.pool import Pool
from raycache._compute.runner import Job, Stage
from raycache._core.config import AUTO
from raycache._core.transient import is_transient
from raycache._errors import (
    CorruptCache,
    DamagedCacheWarning,
    RaycacheError,
    SourceError,
    StoreError,
    StoreUnavailable,
)
from raycache._fill.commit import check_complete, commit, done_ranges, resumable, scan_keys
from raycache._fill.config import FillConfig
from raycache._fill.plan import Plan, load_config, plan
from raycache._fill.result import FillResult
from raycache._source import files as sources

if TYPE_CHECKING:
    import pyarrow as pa

    from raycache._fill.reuse import Either, Reuse
    from raycache._fill.versions import Version

MIN_BLOCKS = 8
"""block_rows: auto leaves at least this many blocks to a fill, so every actor gets work."""
BLOCK_ROWS_CPU, BLOCK_ROWS_GPU = 16_384, 65_536
"""block_rows auto: rows per block and encoder call on CPU and GPU pools (whole shards)."""
SMALL_BLOCK_ROWS = 1024
"""block_rows auto, for a fill of fewer rows than one shard: blocks (and so shards, each with
its resume record) of a MIN_BLOCKS-th of its rows, at least this many, so that an interrupted
small fill keeps what it encoded; fills under this many rows stay one shard."""
BLOCK_BYTES = 1 << 30
"""block_rows auto: input bytes a block, where an encoder says a row's (images); >= a shard."""

__all__ = ["FillResult", "block_rows", "build_pipeline", "complete", "fill",
           "in_process", "job", "run_in_process"]


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
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    p = plan(cfg)
    try:
        manifest = read_manifest(p.store, p.dir)
    except CorruptCache as exc:  # the config says what it holds: fill it again, over it
        warnings.warn(f"{exc}. Filling it again now, from this config", DamagedCacheWarning,
                      stacklevel=2)
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
    from raycache._compute.pool import local_pool
    from raycache._fill.versions import copy_sparse, plan_version

    cfg = p.cfg
    start, start_wall = started or (time.perf_counter(), time.time())
    cluster = where.look_ahead(cfg.in_process is False)  # beside the version's plan
    if version is None and cfg.share and not replace:
        version = plan_version(p)
    covered = done_ranges(done)
    compacted: list[ShardRecord] = []
    if version is not None:  # a resumed record never holds a row the version shares
        shared = version.covered()
        done = [r for r in done if version.keeps(r, shared)]
        if version.sparse:  # compaction: kept rows copied into the version's folder
            compacted = copy_sparse(p, version, done)
        covered = version.covered(done + compacted)
    resumed = sum(r.rows for r in done)
    done = done + compacted
    units, totals = sources.plan_units(p.files, p.format, cfg.source.options, cfg.rows_per_shard,
                                       covered, cfg.source.key, version and version.totals)
    if not sum(totals.values()):
        _no_rows(p)  # before any work
    todo = sum(u.todo() or 0 for u in units)
    local, why = in_process(cfg, todo, cluster)
    if local:
        where.check_store(p.store, len(found.nodes) if (found := cluster()) else 1)
        pool = local_pool(cfg.pool)
    else:  # the block size follows the GPUs an actor gets, and the pool's size the blocks
        from raycache._compute.cluster import cluster_pool

        pool = cluster_pool(cfg.pool, lambda g: todo and -(-todo // block_rows(cfg, todo, g)),
                            autoscaling=cfg.autoscaling, progress=cfg.progress,
                            verbose=cfg.verbose, store=p.store)
    block = block_rows(cfg, todo, pool.gpus)
    new: list[ShardRecord] = []
    skipped: list[SkippedRow] = []  # on_bad_rows: skip
    first = None
    if units:
        reuse = _reuse(p, version) if cfg.reuse else None
        records = _records(runner.run(job(p, units, reuse, block), pool, local=local), skipped)
        with runner.progress_bar(cfg.progress, todo, f"fill {cfg.name}") as bar:
            for record in records:
                first = first or time.perf_counter() - start
                new.append(record)
                bar.update(record.rows)
    records = done + new
    check_complete(p, records, totals, version.carried if version else (), skipped)
    if not sum(r.rows for r in records) + (version.rows if version else 0):
        _no_rows(p)  # never an empty cache committed
    try:
        if version is None:
            records, label_stats = scan_keys(p, records, cluster=not local)
        else:  # the shared rows' keys and counts are known: only the new rows are scanned
            records, counts = scan_keys(p, records, cluster=not local, raw=True) if records \
                else (records, {})
            label_stats = version.label_stats(counts)
    except FileNotFoundError:  # another fill of this cache committed, its rewrites replacing
        manifest = read_manifest(p.store, p.dir)  # shards this one wrote too: its result
        if manifest is None or replace:
            raise
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    reused = sum(r.reused or 0 for r in new)
    by = {e.name: sum((r.encoded or {}).get(e.name, r.rows) for r in new)
          for e in cfg.encoders if not e.trainable}
    encoded = sum(r.rows for r in new) - reused
    began = min((r.encode_started for r in new if r.encode_started), default=None)
    encode_s = max(r.written or 0.0 for r in new) - began if began else 0.0
    sources.check_unchanged(p.files, cfg.source.options, "nothing was committed")
    if lease.lost:  # never a manifest over a folder whose shards went
        raise _removed(p)
    manifest, committed = commit(
        p, records, time.perf_counter() - start, replace, label_stats,
        version.carried if version else (),
        {e.name: e.dim for e in version.base.encoders} if version else None, skipped)
    if not committed:  # another fill of this cache committed first: that cache is the result
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    ran = runner.where(pool, local, why)
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start, encoded,
                      resumed_rows=resumed, reused_rows=reused, first_shard_seconds=first or 0.0,
                      encode_seconds=encode_s, pool=ran, encoded_by=by, repair=replace,
                      startup_seconds=began - start_wall if began else 0.0,
                      shared_rows=version.rows if version else 0,
                      compacted_rows=sum(r.rows for r in compacted),
                      base=version.base.fingerprint if version and
                      version.base.fingerprint != p.fingerprint else "",
                      written_bytes=sum(r.bytes for r in new + compacted))


def _no_rows(p: Plan) -> None:
    raise SourceError(
        f"source {p.cfg.source.path!r} holds no rows (in {len(p.files)} file(s)): a cache of "
        f"no rows would train nothing, so fill {p.cfg.name!r} commits none. Point "
        "source.path at files that hold rows")


def block_rows(cfg: FillConfig, todo: int | None, gpus: float) -> int:
    """Rows per block and encoder call for actors of `gpus` GPUs (PoolConfig.block_rows): whole
    shards, but for a fill of less than one shard (SMALL_BLOCK_ROWS)."""
    shard = cfg.rows_per_shard
    if cfg.pool.block_rows != AUTO:
        return max(1, int(cfg.pool.block_rows) // shard) * shard
    from raycache._encoders import ENCODERS

    rows = BLOCK_ROWS_GPU if gpus > 0 else BLOCK_ROWS_CPU
    per_row = sum(ENCODERS[e.kind].input_bytes(e) for e in cfg.encoders
                  if ENCODERS[e.kind].input_bytes is not None)
    if per_row:
        rows = min(rows, max(1, BLOCK_BYTES // per_row))
    if todo is not None and todo < shard:  # less than a shard: smaller blocks keep progress
        return min(shard, rows, max(SMALL_BLOCK_ROWS, -(-todo // MIN_BLOCKS)))
    if todo is not None:
        rows = min(rows, -(-todo // MIN_BLOCKS))
    return max(1, rows // shard) * shard


def in_process(cfg: FillConfig, todo: int | None, ask: Any = None) -> tuple[bool, str]:
    """Whether the fill encodes its `todo` rows in this process, and why (_compute.where)."""
    gpus = cfg.pool.num_gpus
    return where.in_process(cfg.in_process, cpu=None if gpus == AUTO else gpus == 0,
                            concurrency=cfg.pool.concurrency, rows=todo, ask=ask)


def _reuse(p: Plan, version: Version | None = None, store: bool = False
           ) -> Reuse | Either | None:
    """What other caches hold for the encoders (_fill.reuse); a version's old rows first."""
    from raycache._cache.finding import scan
    from raycache._cache.reads import cache_label
    from raycache._fill.reuse import Either, Reuse

    if version is not None and not store:
        return Either(version.reuse, functools.partial(_reuse, p, version, store=True))
    caches, bad = scan(p.store)
    for exc in bad:  # one warning each; this fill's own folder has had its own
        if getattr(exc, "cache", None) != cache_label(p.dir):
            warnings.warn(str(exc), DamagedCacheWarning, stacklevel=2)
    leave = frozenset() if version is None else frozenset(
        (p.store.path(e.home), e.path) for e in version.base.shards if e.home) | frozenset(
        (p.store.cache_dir(version.base.name, version.base.fingerprint), e.path)
        for e in version.base.shards if not e.home)
    return Reuse.scan(p.store, [e for e in p.cfg.encoders if not e.trainable],
                      p.inputs["encoders"], [c.manifest for c in caches if c.dir != p.dir],
                      leave)


def job(p: Plan, units: list[sources.Unit], reuse: Reuse | None = None,
        block: int | None = None) -> Job:
    """The fill for the stage runner: read -> prepare -> encoder pool -> write shard records."""
    from raycache._fill.shards import write_stage
    from raycache._fill.stages import EncodeActor, FillPrepare

    cfg = p.cfg
    digests = {k: v["weights_digest"] for k, v in p.inputs["encoders"].items()}
    return Job(units, p.format, cfg.source.options, block or cfg.rows_per_shard, cfg.encoders,
               keep=list(dict.fromkeys([cfg.source.key, *cfg.source.labels])),
               model=Stage(EncodeActor, dict(cfg=cfg, digests=digests), local=dict(lazy=True)),
               inputs=FillPrepare(cfg.encoders, reuse, cfg.views, cfg.on_bad_rows == "skip"),
               sink=Stage(write_stage, dict(store=p.store, cache_dir=p.dir,
                                            fingerprint=p.fingerprint, rows=cfg.rows_per_shard,
                                            key=cfg.source.key)))


def run_in_process(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None,
                   block: int | None = None) -> Iterator[ShardRecord]:
    """The fill's stages called in this process: the same shards and records as on Ray."""
    return _records(runner.run_local(job(p, units, reuse, block), pool))


def build_pipeline(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None,
                   block: int | None = None) -> Any:
    """The fill as a lazy Ray Data dataset of shard records (nothing runs until consumed)."""
    return runner.build(job(p, units, reuse, block), pool)


def _records(tables: Iterator[pa.Table], skipped: list[SkippedRow] | None = None
             ) -> Iterator[ShardRecord]:
    """Shard records as the writers finish them; the rows they skipped go to `skipped`."""
    for table in tables:
        for text in table.column("record").to_pylist():
            data = json.loads(text)
            if "skipped" in data:
                if skipped is not None:
                    skipped.extend(SkippedRow.from_json(s) for s in data["skipped"])
                continue
            yield ShardRecord.from_json(data)
