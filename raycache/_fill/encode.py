"""ENCODE, a fill's middle step: the rows it lacks read, prepared, encoded and written as
shards by the stage runner, on Ray Data or in this process; where it runs, in blocks of how
many rows, and what it takes from other caches by content instead of encoding."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycache._cache.records import ShardRecord, SkippedRow
from raycache._compute import runner, where
from raycache._compute.pool import Pool
from raycache._compute.runner import Job, Stage
from raycache._core import started
from raycache._core.caller import warn
from raycache._core.config import AUTO
from raycache._errors import DamagedCacheWarning
from raycache._fill.config import FillConfig
from raycache._fill.plan import Plan
from raycache._fill.shared import Shares
from raycache._source import files as sources

if TYPE_CHECKING:
    import pyarrow as pa

    from raycache._fill.reuse import Either, Reuse
    from raycache._fill.summary import KeySummary

MIN_BLOCKS = 8
"""block_rows: auto leaves at least this many blocks to a fill, so every actor gets work."""
BLOCK_ROWS_CPU, BLOCK_ROWS_GPU = 16_384, 65_536
"""block_rows auto: rows per block and encoder call on CPU and GPU pools (whole shards)."""
SMALL_BLOCK_ROWS = 1024
"""block_rows auto, for a fill of fewer rows than one shard: blocks (and so shards, each with
its resume record) of a MIN_BLOCKS-th of its rows, at least this many, so that an interrupted
small fill keeps what it encoded; fills under this many rows stay one shard."""
RAMP_ROWS = 256
"""A fill's first block of at least 8x this many rows is cut to start with
pieces of this many (compute.runner.Job.ramp): its bar moves within seconds, not a block."""
BLOCK_BYTES = 1 << 28
"""block_rows auto: input bytes a block at most, where an encoder says a row's (images: 256 MiB
of uint8 pixels, 1,783 rows at 224x224); such a block may be less than a shard, and its shards
then hold its rows."""

__all__ = ["Encoded", "block_rows", "build_pipeline", "encode", "in_process", "job",
           "run_in_process"]


@dataclass
class Encoded:
    """What the encode step wrote: its shards' records, the rows it skipped, where it ran."""

    new: list[ShardRecord] = field(default_factory=list)
    """The records of the shards it wrote, as the writers finished them."""
    skipped: list[SkippedRow] = field(default_factory=list)
    """Rows left out (on_bad_rows: skip)."""
    first: float = 0.0
    """Seconds from the fill's start to its first shard (0: none written)."""
    pool: str = ""
    """Where it ran, in words (raycache._compute.runner.where)."""
    local: bool = True
    """Whether it ran in this process."""
    summaries: dict[str, KeySummary] = field(default_factory=dict)
    """The key summaries the writers made, by shard path (for the commit's key scan)."""

    @property
    def reused(self) -> int:
        """Rows whose embeddings came from another cache by content."""
        return sum(r.reused or 0 for r in self.new)

    @property
    def encoded(self) -> int:
        """Rows the encoders ran on."""
        return sum(r.rows for r in self.new) - self.reused

    def encoded_by(self, cfg: FillConfig) -> dict[str, int]:
        """Rows each frozen encoder ran on."""
        return {e.name: sum((r.encoded or {}).get(e.name, r.rows) for r in self.new)
                for e in cfg.encoders if not e.trainable}

    @property
    def began(self) -> float | None:
        """When (time.time) the first encoder call started, if any did."""
        return min((r.encode_started for r in self.new if r.encode_started), default=None)

    @property
    def seconds(self) -> float:
        """From the first encoder call to the last shard written."""
        began = self.began
        return max(r.written or 0.0 for r in self.new) - began if began else 0.0


def encode(p: Plan, units: list[sources.Unit], version: Shares, cluster: Callable,
           start: float) -> Encoded:
    """Encode and write the rows of `units` the fill lacks (nothing where `units` is empty),
    in this process or on Ray as in_process decides (`cluster`: the look-ahead at it);
    `start`: the fill's perf_counter start."""
    from raycache._compute.pool import local_pool

    cfg = p.cfg
    todo = sum(u.todo() or 0 for u in units)
    local, why = in_process(cfg, todo, cluster)
    if local:
        where.check_store(p.store, len(found.nodes) if (found := cluster()) else 1)
        pool = local_pool(cfg.pool)
    else:  # the block size follows the GPUs an actor gets, and the pool's size the blocks
        from raycache._core.extras import need

        need("ray.data", "a fill on Ray (in_process: true runs it here)")
        from raycache._compute.cluster import cluster_pool

        pool = cluster_pool(cfg.pool, lambda g: todo and -(-todo // block_rows(cfg, todo, g)),
                            autoscaling=cfg.autoscaling, progress=cfg.progress,
                            verbose=cfg.verbose, store=p.store)
    block = block_rows(cfg, todo, pool.gpus)
    started.mark("pool")
    out = Encoded(local=local)
    if units:
        reuse = _reuse(p, version) if cfg.reuse else None
        records = _records(runner.run(job(p, units, reuse, block), pool, local=local),
                           out.skipped, out.summaries)
        with runner.progress_bar(cfg.progress, todo, f"fill {cfg.name}") as bar:
            for record in records:
                out.first = out.first or time.perf_counter() - start
                out.new.append(record)
                bar.update(record.rows)
    out.pool = runner.where(pool, local, why)
    return out


def block_rows(cfg: FillConfig, todo: int | None, gpus: float) -> int:
    """Rows per block and encoder call for actors of `gpus` GPUs (PoolConfig.block_rows): whole
    shards, but for a fill of less than one shard (SMALL_BLOCK_ROWS) and where a shard's inputs
    exceed BLOCK_BYTES (images)."""
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
    if per_row and BLOCK_BYTES // per_row < shard:  # sized by bytes: no floor at a shard
        return rows
    return max(1, rows // shard) * shard


def in_process(cfg: FillConfig, todo: int | None, ask: Any = None) -> tuple[bool, str]:
    """Whether the fill encodes its `todo` rows in this process, and why (_compute.where)."""
    gpus = cfg.pool.num_gpus
    return where.in_process(cfg.in_process, cpu=None if gpus == AUTO else gpus == 0,
                            concurrency=cfg.pool.concurrency, rows=todo, ask=ask)


def _reuse(p: Plan, version: Shares) -> Reuse | Either | None:
    """What other caches hold for the encoders (_fill.reuse), as the version asks."""
    return version.reuse(p, lambda leave: _stored(p, leave))


def _stored(p: Plan, leave: frozenset) -> Reuse | None:
    """Reuse by content from the store's other caches, leaving out the shard files `leave`."""
    from raycache._cache.finding import scan
    from raycache._cache.reads import cache_label
    from raycache._fill.reuse import Reuse

    caches, bad = scan(p.store)
    for exc in bad:  # one warning each; this fill's own folder has had its own
        if getattr(exc, "cache", None) != cache_label(p.dir):
            warn(str(exc), DamagedCacheWarning)
    return Reuse.scan(p.store, [e for e in p.cfg.encoders if not e.trainable],
                      p.inputs["encoders"], [c.manifest for c in caches if c.dir != p.dir],
                      leave)


def job(p: Plan, units: list[sources.Unit], reuse: Reuse | None = None,
        block: int | None = None) -> Job:
    """The fill for the stage runner: read -> prepare -> encoder pool -> write shard records."""
    from raycache._fill.commit import counted
    from raycache._fill.shards import write_stage
    from raycache._fill.stages import EncodeActor, FillPrepare

    cfg = p.cfg
    digests = {k: v["weights_digest"] for k, v in p.inputs["encoders"].items()}
    rows = block or cfg.rows_per_shard
    return Job(units, p.format, cfg.source.options, rows, cfg.encoders,
               passthrough=list(dict.fromkeys([cfg.source.key, *cfg.source.labels])),
               model=Stage(EncodeActor, dict(cfg=cfg, digests=digests), local=dict(lazy=True)),
               inputs=FillPrepare(cfg.encoders, reuse, cfg.views, cfg.on_bad_rows == "skip"),
               sink=Stage(write_stage, dict(store=p.store, cache_dir=p.dir,
                                            fingerprint=p.fingerprint, rows=cfg.rows_per_shard,
                                            key=cfg.source.key, labels=counted(p))),
               ramp=RAMP_ROWS if rows >= 8 * RAMP_ROWS else 0)


def run_in_process(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None,
                   block: int | None = None) -> Iterator[ShardRecord]:
    """The fill's stages called in this process: the same shards and records as on Ray."""
    return _records(runner.run_local(job(p, units, reuse, block), pool))


def build_pipeline(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None,
                   block: int | None = None) -> Any:
    """The fill as a lazy Ray Data dataset of shard records (nothing runs until consumed)."""
    return runner.build(job(p, units, reuse, block), pool)


def _records(tables: Iterator[pa.Table], skipped: list[SkippedRow] | None = None,
             summaries: dict[str, KeySummary] | None = None) -> Iterator[ShardRecord]:
    """Shard records as the writers finish them; the rows they skipped go to `skipped`, their
    key summaries to `summaries` (by shard path)."""
    from raycache._fill.summary import KeySummary

    for table in tables:
        blobs = table.column("keys").to_pylist() if "keys" in table.column_names else \
            [None] * table.num_rows
        for text, blob in zip(table.column("record").to_pylist(), blobs, strict=True):
            data = json.loads(text)
            if blob is not None and summaries is not None:
                summaries[data["path"]] = KeySummary.from_bytes(blob)
            if "skipped" in data:
                if skipped is not None:
                    skipped.extend(SkippedRow.from_json(s) for s in data["skipped"])
                continue
            yield ShardRecord.from_json(data)
