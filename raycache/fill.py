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
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from raycache import sources
from raycache.cache import Cache, read_manifest
from raycache.config import AUTO, FillConfig, load
from raycache.errors import ConfigError, RaycacheError
from raycache.fingerprint import fingerprint
from raycache.manifest import FORMAT_VERSION, EncoderEntry, Manifest, ShardEntry, human_bytes
from raycache.resources import LIGHT_CPUS, READ_CPUS, Pool
from raycache.store import MANIFEST, PROGRESS, Store

__all__ = ["AUTO_IN_PROCESS_ROWS", "FillResult", "Plan", "build_pipeline", "fill", "in_process",
           "plan", "run_in_process"]

AUTO_IN_PROCESS_ROWS = 20_000
"""in_process: auto runs a CPU fill of at most this many rows to encode without Ray (a couple
of minutes of one process on a small machine, where Ray's start-up costs ~25 s)."""


@dataclass
class Plan:
    """Everything decided on the driver before any work starts."""

    cfg: FillConfig
    store: Store
    format: str
    files: list[sources.SourceFile]
    schema: pa.Schema
    inputs: dict[str, Any]
    fingerprint: str

    @property
    def dir(self) -> str:
        return self.store.cache_dir(self.cfg.name, self.fingerprint)


@dataclass
class FillResult:
    """What a fill did: the committed cache, hit or miss, and how long it took."""

    cache: Cache
    hit: bool
    seconds: float
    """Wall time of the fill call, start-up included."""
    encoded_rows: int
    resumed_rows: int = 0
    """Rows an interrupted fill had already encoded, kept and not encoded again."""
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
            return head + f"hit, {m.rows} rows in {len(m.shards)} shards, encoded nothing"
        resumed = f", {self.resumed_rows} resumed" if self.resumed_rows else ""
        return head + (
            f"miss, {m.rows} rows ({self.encoded_rows} encoded{resumed}), {len(m.shards)} "
            f"shards, {human_bytes(m.bytes)}, {self.seconds:.1f} s, "
            f"{self.rows_per_second:.1f} rows/s ({self.encode_rows_per_second:.1f} rows/s after "
            f"a start-up of {self.first_shard_seconds:.1f} s to the first shard)"
        )

    def __repr__(self) -> str:
        return f"FillResult({self.summary()})"


def plan(cfg: FillConfig) -> Plan:
    """Check every input and compute the fingerprint; no Ray, no encoding."""
    from raycache.encoders import REGISTRY

    store = Store.from_config(cfg.store)
    store.check_reachable()
    fmt, files = sources.list_files(cfg.source)
    schema = sources.read_schema(files[0], fmt, cfg.source.options)
    problems = sources.check_columns(
        schema, cfg.source, [e.input for e in cfg.encoders], files[0].uri
    )
    if problems:
        raise ConfigError(problems)
    inputs = {
        "format_version": FORMAT_VERSION,
        "source": {
            "format": fmt,
            "files": [f.describe() for f in files],
            "key": cfg.source.key,
            "labels": cfg.source.labels,
        },
        "encoders": {e.name: REGISTRY[e.kind].describe(e) for e in cfg.encoders},
        "rows_per_shard": cfg.rows_per_shard,
    }
    return Plan(cfg, store, fmt, files, schema, inputs, fingerprint(inputs))


def fill(config: FillConfig | dict | str, *, progress: bool | None = None) -> FillResult:
    """Fill the cache described by `config` (a FillConfig, a dict or a YAML path)."""
    cfg = load(FillConfig, config)
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    p = plan(cfg)
    manifest = read_manifest(p.store, p.dir)
    if manifest is not None:
        return FillResult(Cache(p.store, manifest), True, 0.0, 0)

    from raycache.resources import request, size_pool

    start = time.perf_counter()
    done = _resumable(p)
    resumed = sum(r["rows"] for r in done)
    units, totals = sources.plan_units(p.files, p.format, cfg.source.options, cfg.rows_per_shard,
                                       _done_ranges(done))
    todo = sum(u.todo() or 0 for u in units) if p.format == "parquet" else None
    blocks = None if todo is None else -(-todo // cfg.rows_per_shard)
    local = in_process(cfg, todo)
    if local:
        pool = size_pool(cfg, [{"CPU": float(os.cpu_count() or 1)}], 1)
    else:
        from raycache.cluster import check_store_for_cluster, connect
        from raycache.resources import nodes

        connect(cfg.progress, cfg.verbose)
        check_store_for_cluster(p.store)
        pool = size_pool(cfg, nodes(), blocks)
    if cfg.autoscaling and not local:
        from ray.autoscaler.sdk import request_resources

        request_resources(**request(pool))
    new: list[dict[str, Any]] = []
    first = None
    if units:
        records = (run_in_process(p, units, pool) if local
                   else _records(build_pipeline(p, units, pool)))
        with _progress_bar(cfg, todo) as bar:
            for record in records:
                first = first or time.perf_counter() - start
                new.append(record)
                bar.update(record["rows"])
    records = done + new
    _check_complete(p, records, totals)
    encoded = sum(r["rows"] for r in new)
    encode_s = (max(r["written"] for r in new) - min(r["encode_started"] for r in new)
                if new else 0.0)
    manifest = _commit(p, records, time.perf_counter() - start)
    where = f"in-process, {pool.threads} thread(s)" if local else pool.describe()
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start, encoded,
                      resumed, first or 0.0, encode_s, where)


def in_process(cfg: FillConfig, todo: int | None) -> bool:
    """Whether the fill runs its stages in this process (see FillConfig.in_process)."""
    if cfg.in_process != AUTO:
        return bool(cfg.in_process)
    ray = sys.modules.get("ray")
    cluster = os.environ.get("RAY_ADDRESS") or (ray is not None and ray.is_initialized())
    return (not cluster and cfg.num_gpus == 0 and cfg.concurrency == AUTO
            and todo is not None and todo <= AUTO_IN_PROCESS_ROWS)


def run_in_process(p: Plan, units: list[sources.Unit], pool: Pool) -> Iterator[dict]:
    """The pipeline's stages called in this process, one shard-sized piece at a time: the
    same reads, tokeniser, encoder and writer, hence the same shards and records."""
    from raycache.fill_stages import EncodeActor, PrepareActor
    from raycache.shards import write_stage

    cfg = p.cfg
    keep = list(dict.fromkeys([cfg.source.key, *cfg.source.labels]))
    columns = list(dict.fromkeys([*keep, *(e.input for e in cfg.encoders)]))
    import torch

    threads = torch.get_num_threads()  # the encoder sets its own; the caller's come back after
    try:
        prepare = PrepareActor(cfg.encoders, keep)
        encode = EncodeActor(cfg, pool, {k: v["weights_digest"]
                                         for k, v in p.inputs["encoders"].items()})
        for unit in units:
            for piece in sources.read_unit(unit, p.format, cfg.source.options,
                                           cfg.rows_per_shard, columns):
                out = write_stage(encode(prepare(piece)), p.store, p.dir, p.fingerprint,
                                  cfg.rows_per_shard)
                yield from (json.loads(text) for text in out.column("record").to_pylist())
    finally:
        torch.set_num_threads(threads)


def build_pipeline(p: Plan, units: list[sources.Unit], pool: Pool) -> Any:
    """The fill as a lazy Ray Data dataset of shard records (nothing runs until consumed):
    read units -> prepare (tokenise) -> encoder actor pool -> write shards."""
    import ray.data

    from raycache.fill_stages import EncodeActor, PrepareActor
    from raycache.shards import write_stage

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
        PrepareActor, fn_constructor_kwargs=dict(encoders=cfg.encoders, keep=keep),
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
    from raycache.cluster import unwrap

    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for text in batch.column("record").to_pylist():
                yield json.loads(text)
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


def _resumable(p: Plan) -> list[dict[str, Any]]:
    """Records of the shards an earlier, interrupted fill of this fingerprint wrote."""
    out = []
    for name in p.store.listdir(f"{p.dir}/{PROGRESS}"):
        if name.endswith(".json"):
            record = p.store.read_json(f"{p.dir}/{PROGRESS}/{name}")
            if p.store.exists(f"{p.dir}/{record['path']}"):
                out.append(record)
    return out


def _done_ranges(records: list[dict[str, Any]]) -> dict[str, sources.Ranges]:
    by_block: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        for block, a, b, *_ in r["ranges"]:
            by_block[block].append((a, b))
    return {k: tuple(sorted(v)) for k, v in by_block.items()}


def _check_complete(p: Plan, records: list[dict], totals: dict[str, int]) -> None:
    """Every row of every source file in exactly one shard, or no manifest."""
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        for block, a, b, _, rows in r["ranges"]:
            covered[block].append((a, b))
            totals.setdefault(block, rows)
    bad = []
    for f in p.files:
        spans = sorted(covered.get(f.block, []))
        overlap = any(b0 > a1 for (_, b0), (a1, _) in zip(spans, spans[1:], strict=False))
        if overlap or sum(b - a for a, b in spans) != totals.get(f.block, 0):
            bad.append(f.uri)
    if bad:
        raise RaycacheError(
            f"fill of {p.cfg.name}/{p.fingerprint} wrote incomplete or overlapping shards for "
            f"{bad}; no manifest was written. Run the fill again: it resumes and encodes only "
            "the missing rows"
        )


def _commit(p: Plan, records: list[dict[str, Any]], seconds: float) -> Manifest:
    records = sorted(records, key=lambda r: (r["ranges"][0][3], r["ranges"][0][1]))
    dims = records[0]["dims"] if records else {}
    described = p.inputs["encoders"]
    manifest = Manifest(
        name=p.cfg.name,
        fingerprint=p.fingerprint,
        inputs=p.inputs,
        encoders=[
            EncoderEntry(
                name=e.name,
                kind=e.kind,
                input=e.input,
                dim=int(dims.get(e.name) or described[e.name].get("dim") or 0),
                dtype=e.dtype,
                weights_digest=described[e.name]["weights_digest"],
            )
            for e in p.cfg.encoders
        ],
        key_column=p.cfg.source.key,
        label_columns=list(p.cfg.source.labels),
        label_types={c: str(p.schema.field(c).type) for c in p.cfg.source.labels},
        shards=[
            ShardEntry(r["path"], r["rows"], r["bytes"], r["sha256"], r["ranges"][0][3],
                       [x[:3] for x in r["ranges"]])
            for r in records
        ],
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        fill_seconds=round(seconds, 3),
        extra={"encoder_configs": {e.name: dataclasses.asdict(e) for e in p.cfg.encoders}},
    )
    p.store.write_json(f"{p.dir}/{MANIFEST}", manifest.to_dict())
    with contextlib.suppress(FileNotFoundError):
        p.store.fs.rm(f"{p.dir}/{PROGRESS}", recursive=True)
    return manifest
