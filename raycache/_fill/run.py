"""FILL: read the source, prepare and encode it in Ray Data stages (or, for a small CPU fill,
the same stages in this process), write shards, commit."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache, read_manifest
from raycache._cache.lease import Lease
from raycache._cache.manifest import human_bytes
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
from raycache._source import files as sources

if TYPE_CHECKING:
    import pyarrow as pa

    from raycache._fill.reuse import Either, Reuse
    from raycache._fill.versions import Version

MIN_BLOCKS = 8
"""block_rows: auto leaves at least this many blocks to a fill, so every actor gets work."""
BLOCK_ROWS_CPU, BLOCK_ROWS_GPU = 16_384, 65_536
"""block_rows auto: rows per block and encoder call on CPU and GPU pools (whole shards)."""
BLOCK_BYTES = 1 << 30
"""block_rows auto: input bytes a block, where an encoder says a row's (images); >= a shard."""

__all__ = ["FillResult", "block_rows", "build_pipeline", "complete", "fill",
           "in_process", "job", "run_in_process"]


@dataclass
class FillResult:
    """What a fill (or a repair) did: the committed cache, hit or miss, and how long it took.

    Example:
        ```python
        print(raycache.fill("fill.yaml").summary())
        ```
    """
    cache: Cache
    """The committed cache."""
    hit: bool
    """It was committed already: nothing was read or encoded."""
    seconds: float
    """Wall time of the fill call, start-up included."""
    encoded_rows: int
    """Rows that at least one encoder encoded."""
    resumed_rows: int = 0
    """Rows an interrupted fill had already encoded, kept and not encoded again."""
    reused_rows: int = 0
    """Rows whose every embedding came from caches in the store (same encoder, same input)."""
    encoded_by: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows each encoder encoded (the rest of its rows it reused or resumed)."""
    first_shard_seconds: float = 0.0
    """From the start of the fill to its first shard written (start-up, its encoding)."""
    encode_seconds: float = 0.0
    """From the first encoder call to the last shard written."""
    pool: str = ""
    """The encoder pool it ran, in words."""
    startup_seconds: float = 0.0
    """To the first encoder call: reading, starting Ray and the actors, loading the models."""
    repair: bool = False
    """A repair (raycache._upkeep.repair): the shards it re-encoded, into a committed cache."""
    shared_rows: int = 0
    """Rows shared with an older version (`base`), in its shard files: not read nor written."""
    base: str = ""
    """The fingerprint of the version it shares rows with (empty: none)."""
    written_bytes: int = 0
    """Bytes of the shards this call wrote."""
    compacted_rows: int = 0
    """Rows of sparse shared shards copied into new shards of this version (compaction)."""
    retried: int = 0
    """Rows an earlier fill of this cache skipped (on_bad_rows: skip), tried again."""

    @property
    def rows_per_second(self) -> float:
        """Rows encoded per second of wall time, start-up included."""
        return self.encoded_rows / self.seconds if self.seconds else 0.0

    @property
    def encode_rows_per_second(self) -> float:
        """Rows encoded per second once the encoders were running."""
        return self.encoded_rows / self.encode_seconds if self.encode_seconds else 0.0

    def summary(self) -> str:
        """What this call did, in one line: its timings add up to its wall time.

        Returns:
            The line (rows encoded, reused, resumed, shared; shards, bytes, labels, timings).
        """
        m = self.cache.manifest
        head = f"{'repair' if self.repair else 'fill'} {m.name}/{m.fingerprint[:12]}: "
        if self.hit and self.repair:
            return head + f"every shard is good, {m.rows} rows in {m.shard_count} shards; " \
                          "nothing to repair"
        if self.hit:
            return head + f"hit, {m.rows} rows in {m.shard_count} shards, encoded nothing"
        resumed = f", {self.resumed_rows} resumed" if self.resumed_rows else ""
        shared = f", {self.shared_rows} shared with version {self.base[:12]}" if self.base else ""
        shared += f", {self.compacted_rows} compacted" if self.compacted_rows else ""
        what = (f"re-encoded the bad shards, {m.rows} rows ({self.encoded_rows} encoded"
                f"{self._by()}, {self.resumed_rows} kept from good shards), " if self.repair else
                f"miss, {m.rows} rows ({self.encoded_rows} encoded{self._by()}, "
                f"{self.reused_rows} reused{resumed}{shared}), ")
        wrote = (f" ({human_bytes(self.written_bytes)} written)"
                 if self.base or self.compacted_rows else "")
        if self.retried:
            wrote += f"; retried {self.retried} skipped row(s)"
        wrote += "".join(f"; LABELS: {p}" for p in m.label_problems)
        if skipped := len(m.skipped):
            wrote += (f"; SKIPPED {skipped} row(s) it could not cache (on_bad_rows: skip; "
                      "`raycache inspect` lists them, the next fill retries them)")
        return head + (f"{what}{m.shard_count} shards, {human_bytes(m.bytes)}{wrote}, "
                       f"{self._timings()}")

    def _timings(self) -> str:
        """The call's wall time split so that it adds up: start-up, encoding, the rest."""
        if not self.encoded_rows:  # every row reused or resumed: no encoder ran
            return f"{self.seconds:.1f} s, nothing encoded (every row reused or resumed)"
        startup = min(max(self.startup_seconds, 0.0), self.seconds)
        encode = min(self.encode_seconds, self.seconds - startup)
        rest = max(self.seconds - startup - encode, 0.0)
        return (f"{self.seconds:.1f} s = {startup:.1f} s start-up (to the first encoder call) "
                f"+ {encode:.1f} s encoding and writing shards "
                f"({self.encoded_rows / encode if encode else 0.0:.1f} rows/s) "
                f"+ {rest:.1f} s checking and committing")

    def _by(self) -> str:
        return f" [{', '.join(f'{k} {v}' for k, v in self.encoded_by.items())}]" \
            if len(self.encoded_by) > 1 else ""

    def __repr__(self) -> str:
        return f"FillResult({self.summary()})"


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
    """Rows per block and encoder call for actors of `gpus` GPUs (PoolConfig.block_rows)."""
    shard = cfg.rows_per_shard
    if cfg.pool.block_rows != AUTO:
        return max(1, int(cfg.pool.block_rows) // shard) * shard
    from raycache._encoders import ENCODERS

    rows = BLOCK_ROWS_GPU if gpus > 0 else BLOCK_ROWS_CPU
    per_row = sum(ENCODERS[e.kind].input_bytes(e) for e in cfg.encoders
                  if ENCODERS[e.kind].input_bytes is not None)
    if per_row:
        rows = min(rows, max(1, BLOCK_BYTES // per_row))
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
    from raycache._cache.committed import scan
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
