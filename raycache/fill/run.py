"""FILL: read the source, prepare and encode it in Ray Data stages (or, for a small CPU fill,
the same stages in this process), write shards, commit."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raycache.cache.committed import Cache, read_manifest
from raycache.cache.manifest import human_bytes
from raycache.cache.records import ShardRecord
from raycache.compute.pool import LIGHT_CPUS, READ_CPUS, Pool
from raycache.core.config import AUTO
from raycache.fill.commit import check_complete, commit, done_ranges, resumable, scan_keys
from raycache.fill.config import FillConfig
from raycache.fill.plan import Plan, load_config, plan
from raycache.source import files as sources

if TYPE_CHECKING:
    from raycache.fill.reuse import Reuse

__all__ = ["AUTO_IN_PROCESS_ROWS", "FillResult", "build_pipeline", "complete", "fill",
           "in_process", "run_in_process"]

AUTO_IN_PROCESS_ROWS = 20_000
"""in_process: auto runs a CPU fill of at most this many rows to encode without Ray (a couple
of minutes of one process on a small machine, where Ray's start-up costs ~25 s)."""


@dataclass
class FillResult:
    """What a fill did: the committed cache, hit or miss, and how long it took."""

    cache: Cache
    hit: bool
    seconds: float
    """Wall time of the fill call, start-up included."""
    encoded_rows: int
    """Rows that at least one encoder encoded."""
    resumed_rows: int = 0
    """Rows an interrupted fill had already encoded, kept and not encoded again."""
    reused_rows: int = 0
    """Rows whose every embedding was taken from caches already in the store (same encoder,
    same input value), not encoded."""
    encoded_by: dict[str, int] = dataclasses.field(default_factory=dict)
    """Rows each encoder encoded (the rest of its rows it reused or resumed)."""
    first_shard_seconds: float = 0.0
    """From the start of the fill to its first shard written: the start-up cost."""
    encode_seconds: float = 0.0
    """From the first encoder call to the last shard written."""
    pool: str = ""
    """The encoder pool it ran, in words."""

    @property
    def rows_per_second(self) -> float:
        """Rows encoded per second of wall time, start-up included."""
        return self.encoded_rows / self.seconds if self.seconds else 0.0

    @property
    def encode_rows_per_second(self) -> float:
        """Rows encoded per second once the encoders were running."""
        return self.encoded_rows / self.encode_seconds if self.encode_seconds else 0.0

    def summary(self) -> str:
        m = self.cache.manifest
        head = f"fill {m.name}/{m.fingerprint[:12]}: "
        if self.hit:
            return head + f"hit, {m.rows} rows in {m.shard_count} shards, encoded nothing"
        resumed = f", {self.resumed_rows} resumed" if self.resumed_rows else ""
        return head + (
            f"miss, {m.rows} rows ({self.encoded_rows} encoded{self._by()}, {self.reused_rows} "
            f"reused{resumed}), {m.shard_count} "
            f"shards, {human_bytes(m.bytes)}, {self.seconds:.1f} s, "
            f"{self.rows_per_second:.1f} rows/s ({self.encode_rows_per_second:.1f} rows/s after "
            f"a start-up of {self.first_shard_seconds:.1f} s to the first shard)"
        )

    def _by(self) -> str:
        by = self.encoded_by
        return f" [{', '.join(f'{k} {v}' for k, v in by.items())}]" if len(by) > 1 else ""

    def __repr__(self) -> str:
        return f"FillResult({self.summary()})"


def fill(config: FillConfig | dict | str, *, progress: bool | None = None) -> FillResult:
    """Fill the cache described by `config` (a FillConfig, a dict or a YAML path)."""
    cfg = load_config(config)
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    p = plan(cfg)
    manifest = read_manifest(p.store, p.dir)
    if manifest is not None:
        return FillResult(Cache(p.store, manifest), True, 0.0, 0)

    return complete(p, resumable(p))


def complete(p: Plan, done: list[ShardRecord], *, replace: bool = False) -> FillResult:
    """Encode every row that the shard records `done` do not cover, check, and commit (with
    `replace`, over a committed manifest: a repair)."""
    from raycache.compute.pool import request, size_pool

    cfg = p.cfg
    start = time.perf_counter()
    resumed = sum(r.rows for r in done)
    units, totals = sources.plan_units(p.files, p.format, cfg.source.options, cfg.rows_per_shard,
                                       done_ranges(done))
    todo = sum(u.todo() or 0 for u in units) if p.format == "parquet" else None
    blocks = None if todo is None else -(-todo // cfg.rows_per_shard)
    local = in_process(cfg, todo)
    if local:
        pool = size_pool(cfg, [{"CPU": float(os.cpu_count() or 1)}], 1)
    else:
        from raycache.compute.cluster import check_store_for_cluster, connect
        from raycache.compute.pool import nodes

        connect(cfg.progress, cfg.verbose)
        check_store_for_cluster(p.store)
        pool = size_pool(cfg, nodes(), blocks)
    if cfg.autoscaling and not local:
        from ray.autoscaler.sdk import request_resources

        request_resources(**request(pool))
    new: list[ShardRecord] = []
    first = None
    if units:
        reuse = _reuse(p) if cfg.reuse else None
        records = (run_in_process(p, units, pool, reuse) if local
                   else _records(build_pipeline(p, units, pool, reuse)))
        with _progress_bar(cfg, todo) as bar:
            for record in records:
                first = first or time.perf_counter() - start
                new.append(record)
                bar.update(record.rows)
    records = done + new
    check_complete(p, records, totals)
    records, label_stats = scan_keys(p, records)
    reused = sum(r.reused or 0 for r in new)
    by = {e.name: sum((r.encoded or {}).get(e.name, r.rows) for r in new)
          for e in cfg.encoders if not e.trainable}
    encoded = sum(r.rows for r in new) - reused
    encode_s = (max(r.written or 0.0 for r in new) - min(r.encode_started or 0.0 for r in new)
                if new else 0.0)
    manifest, committed = commit(p, records, time.perf_counter() - start, replace, label_stats)
    if not committed:  # another fill of this cache committed first: that cache is the result
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    where = f"in-process, {pool.threads} thread(s)" if local else pool.describe()
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start, encoded,
                      resumed_rows=resumed, reused_rows=reused, first_shard_seconds=first or 0.0,
                      encode_seconds=encode_s, pool=where, encoded_by=by)


def in_process(cfg: FillConfig, todo: int | None) -> bool:
    """Whether the fill runs its stages in this process (see FillConfig.in_process)."""
    if cfg.in_process != AUTO:
        return bool(cfg.in_process)
    ray = sys.modules.get("ray")
    cluster = os.environ.get("RAY_ADDRESS") or (ray is not None and ray.is_initialized())
    return (not cluster and cfg.num_gpus == 0 and cfg.concurrency == AUTO
            and todo is not None and todo <= AUTO_IN_PROCESS_ROWS)


def _reuse(p: Plan) -> Reuse | None:
    """What the store's other committed caches hold for this fill's encoders (see
    raycache.fill.reuse)."""
    from raycache.cache.committed import ls
    from raycache.fill.reuse import Reuse

    return Reuse.scan(p.store, [e for e in p.cfg.encoders if not e.trainable],
                      p.inputs["encoders"],
                      [c.manifest for c in ls(p.store) if c.dir != p.dir])


def run_in_process(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None
                   ) -> Iterator[ShardRecord]:
    """The pipeline's stages called in this process, one shard-sized piece at a time: the
    same reads, tokeniser, encoder and writer, hence the same shards and records."""
    from raycache.fill.shards import write_stage
    from raycache.fill.stages import EncodeActor, PrepareActor

    cfg = p.cfg
    keep = list(dict.fromkeys([cfg.source.key, *cfg.source.labels]))
    columns = list(dict.fromkeys([*keep, *(e.input for e in cfg.encoders)]))
    import torch

    threads = torch.get_num_threads()  # the encoder sets its own; the caller's come back after
    try:
        prepare = PrepareActor(cfg.encoders, keep, reuse, cfg.views)
        encode = EncodeActor(cfg, pool, {k: v["weights_digest"]
                                         for k, v in p.inputs["encoders"].items()}, lazy=True)
        for unit in units:
            for piece in sources.read_unit(unit, p.format, cfg.source.options,
                                           cfg.rows_per_shard, columns):
                out = write_stage(encode(prepare(piece)), p.store, p.dir, p.fingerprint,
                                  cfg.rows_per_shard)
                yield from (ShardRecord.from_json(json.loads(text))
                            for text in out.column("record").to_pylist())
    finally:
        torch.set_num_threads(threads)


def build_pipeline(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None
                   ) -> Any:
    """The fill as a lazy Ray Data dataset of shard records (nothing runs until consumed):
    read units -> prepare (tokenise) -> encoder actor pool -> write shards."""
    import ray.data

    from raycache.fill.shards import write_stage
    from raycache.fill.stages import EncodeActor, PrepareActor

    cfg = p.cfg
    keep = list(dict.fromkeys([cfg.source.key, *cfg.source.labels]))
    columns = list(dict.fromkeys([*keep, *(e.input for e in cfg.encoders)]))
    ds = ray.data.from_items([{"unit": pickle.dumps(u)} for u in units],
                             override_num_blocks=len(units))  # one read task per unit
    ds = ds.map_batches(
        sources.read_stage,
        fn_kwargs=dict(fmt=p.format, options=cfg.source.options, rows=cfg.rows_per_shard,
                       columns=columns),
        batch_size=1, num_cpus=READ_CPUS, batch_format="pyarrow",
    ).repartition(target_num_rows_per_block=cfg.rows_per_shard)  # blocks spread over the pool
    ds = ds.map_batches(
        PrepareActor, fn_constructor_kwargs=dict(encoders=cfg.encoders, keep=keep, reuse=reuse,
                                                 views=cfg.views),
        batch_size=None, num_cpus=pool.prepare_cpus, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=pool.prepare_actors),
    )
    ds = ds.map_batches(
        EncodeActor,
        fn_constructor_kwargs=dict(
            cfg=cfg, pool=pool,
            digests={k: v["weights_digest"] for k, v in p.inputs["encoders"].items()},
        ),
        batch_size=cfg.rows_per_shard,  # one shard per call; Ray Data needs it for GPU stages
        compute=ray.data.ActorPoolStrategy(size=pool.actors),
        num_cpus=pool.cpus, num_gpus=pool.gpus or None, batch_format="pyarrow",
    )
    return ds.map_batches(
        write_stage,
        fn_kwargs=dict(store=p.store, cache_dir=p.dir, fingerprint=p.fingerprint,
                       rows=cfg.rows_per_shard),
        batch_size=None, num_cpus=LIGHT_CPUS, batch_format="pyarrow",
    )


def _records(ds: Any) -> Any:
    """Shard records as the writers finish them; a stage's error re-raised as raycache's own."""
    from raycache.compute.cluster import unwrap

    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for text in batch.column("record").to_pylist():
                yield ShardRecord.from_json(json.loads(text))
    except Exception as exc:  # Ray wraps stage errors in its own types
        raise unwrap(exc) from exc


@contextlib.contextmanager
def _progress_bar(cfg: FillConfig, total: int | None) -> Any:
    from tqdm.auto import tqdm

    bar = tqdm(total=total, disable=not cfg.progress, unit=" rows", desc=f"fill {cfg.name}",
               dynamic_ncols=True, smoothing=0.1)
    try:
        yield bar
    finally:
        bar.close()
