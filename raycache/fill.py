"""FILL: read the source, encode it in a pool of Ray actors, write shards, commit a manifest."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raycache import sources
from raycache.cache import Cache, read_manifest
from raycache.config import FillConfig, load
from raycache.encoders import REGISTRY
from raycache.errors import ConfigError, EncoderError, RaycacheError
from raycache.fingerprint import fingerprint
from raycache.manifest import FORMAT_VERSION, EncoderEntry, Manifest, ShardEntry, human_bytes
from raycache.store import MANIFEST, SHARDS, Store

PROGRESS = "_progress"
META = ("__block", "__offset", "__row", "__slice_rows", "__source", "__source_rows")


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
    cache: Cache
    hit: bool
    seconds: float
    encoded_rows: int

    def summary(self) -> str:
        m = self.cache.manifest
        head = f"fill {m.name}/{m.fingerprint[:12]}: "
        if self.hit:
            return head + f"hit, {m.rows} rows in {len(m.shards)} shards, encoded nothing"
        rate = self.encoded_rows / self.seconds if self.seconds else 0.0
        return head + (
            f"miss, {m.rows} rows, {len(m.shards)} shards, {human_bytes(m.bytes)}, "
            f"{self.seconds:.1f} s, {rate:.1f} rows/s"
        )

    def __repr__(self) -> str:
        return f"FillResult({self.summary()})"


def plan(cfg: FillConfig) -> Plan:
    """Check every input and compute the fingerprint; no Ray, no encoding."""
    store = Store(cfg.store.uri, cfg.store.options, cfg.store.shared)
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
        cfg.progress = progress
    p = plan(cfg)
    manifest = read_manifest(p.store, p.dir)
    if manifest is not None:
        return FillResult(Cache(p.store, manifest), True, 0.0, 0)

    from raycache.cluster import check_store_for_cluster, connect

    connect(cfg.progress)
    check_store_for_cluster(p.store)
    start = time.perf_counter()
    done = _finished_blocks(p)
    todo = [f for f in p.files if f.block not in done]
    records = [r for rs in done.values() for r in rs]
    if todo:
        new = _run_pipeline(p, todo)
        _check_complete(p, todo, new)
        records += new
    encoded = sum(r["rows"] for r in records if r["block"] in {f.block for f in todo})
    manifest = _commit(p, records, time.perf_counter() - start)
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start, encoded)


def _run_pipeline(p: Plan, todo: list[sources.SourceFile]) -> list[dict[str, Any]]:
    import ray.data

    cfg = p.cfg
    pool = ray.data.ActorPoolStrategy
    wanted = [cfg.source.key, *cfg.source.labels, *(e.input for e in cfg.encoders)]
    columns = list(dict.fromkeys(wanted))
    slices = sources.plan_slices(todo, p.format, cfg.source.options, cfg.rows_per_shard)
    ds = ray.data.from_items(
        [{"uri": s.file.uri, "size": s.file.size, "version": s.file.version,
          "offset": s.offset, "rows": s.rows} for s in slices],
        override_num_blocks=len(slices),  # one block per slice, spread over the actor pool
    )
    ds = ds.map_batches(
        ReadSlices,
        fn_constructor_kwargs=dict(
            fmt=p.format, options=cfg.source.options, rows=cfg.rows_per_shard, columns=columns
        ),
        batch_size=1,
        compute=pool(size=1),  # reading is cheap next to encoding; each extra process imports torch
        num_cpus=0.25,
        batch_format="pyarrow",
    )
    ds = ds.map_batches(
        EncodeActor,
        fn_constructor_kwargs=dict(
            cfg=cfg, digests={k: v["weights_digest"] for k, v in p.inputs["encoders"].items()}
        ),
        batch_size=None,  # one slice per call; the actor runs its forward passes in batch_size
        compute=pool(size=cfg.concurrency),
        num_gpus=cfg.num_gpus,
        num_cpus=cfg.num_cpus,
        batch_format="pyarrow",
    )
    ds = ds.map_batches(
        WriteShards,
        fn_constructor_kwargs=dict(store=p.store, cache_dir=p.dir, fingerprint=p.fingerprint),
        batch_size=None,
        compute=pool(size=1),
        num_cpus=0.25,
        batch_format="pyarrow",
    )
    return [json.loads(r["record"]) for r in ds.take_all()]


class ReadSlices:
    """Ray Data stage: a slice in (a Parquet row range or a whole text file), tables of at most
    `rows` rows out, tagged with where they came from."""

    def __init__(self, fmt: str, options: dict, rows: int, columns: list[str]):
        self.fmt, self.options, self.rows, self.columns = fmt, options, rows, columns

    def __call__(self, batch: pa.Table) -> Iterator[pa.Table]:
        for item in batch.to_pylist():
            f = sources.SourceFile(item["uri"], item["size"], item["version"])
            s = sources.Slice(f, item["offset"], item["rows"])
            for offset, total, table in sources.read_slice(s, self.fmt, self.options, self.rows):
                missing = [c for c in self.columns if c not in table.column_names]
                if missing:
                    raise RaycacheError(
                        f"source file {f.uri!r} lacks columns {missing}; every file of a source "
                        "needs the key, label and input columns"
                    )
                n = table.num_rows
                meta = {
                    "__block": pa.array([f.block] * n),
                    "__offset": pa.array([offset] * n, pa.int64()),
                    "__row": pa.array(range(offset, offset + n), pa.int64()),
                    "__slice_rows": pa.array([n] * n, pa.int64()),
                    "__source": pa.array([f.uri] * n),
                    "__source_rows": pa.array([total] * n, pa.int64()),
                }
                out = table.select(self.columns)
                for name, column in meta.items():
                    out = out.append_column(name, column)
                yield out


class EncodeActor:
    """Ray Data actor: loads each frozen encoder once, adds one embedding column per encoder."""

    def __init__(self, cfg: FillConfig, digests: dict[str, str]):
        import torch

        self.cfg = cfg
        device = "cuda" if cfg.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        self.encoders = {e.name: REGISTRY[e.kind].load(e, device) for e in cfg.encoders}
        for e in cfg.encoders:
            loaded = self.encoders[e.name].weights_digest()
            if loaded != digests[e.name]:
                raise EncoderError(
                    f"encoder {e.name!r} loaded weights {loaded[:12]} in a fill actor, but the "
                    f"fingerprint was computed from {digests[e.name][:12]}: its weights differ "
                    "between loads (random initialisation?). Load fixed weights, or seed the "
                    "factory, so every actor encodes with the same model"
                )

    def __call__(self, table: pa.Table) -> pa.Table:
        keep = [self.cfg.source.key, *self.cfg.source.labels, *META]
        out = table.select(list(dict.fromkeys(keep)))
        bs = self.cfg.batch_size
        for e in self.cfg.encoders:
            column = table.column(e.input).combine_chunks()
            parts = [
                self.encoders[e.name].encode(column.slice(i, bs))
                for i in range(0, table.num_rows, bs)
            ]
            emb = np.concatenate(parts).astype(e.dtype)
            flat = pa.array(emb.reshape(-1), type=pa.from_numpy_dtype(emb.dtype))
            out = out.append_column(e.name, pa.FixedSizeListArray.from_arrays(flat, emb.shape[1]))
        return out


class WriteShards:
    """Ray Data stage (one actor): gathers the encoded rows of each source slice, which arrive
    in pieces from any encoder actor, and writes the slice as one shard once it is whole."""

    def __init__(self, store: Store, cache_dir: str, fingerprint: str):
        self.store, self.dir, self.fingerprint = store, cache_dir, fingerprint
        self.pending: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)

    def __call__(self, table: pa.Table) -> pa.Table:
        records = []
        groups: dict[tuple[str, int], list[int]] = defaultdict(list)
        blocks = table.column("__block").to_pylist()
        offsets = table.column("__offset").to_pylist()
        for i, key in enumerate(zip(blocks, offsets, strict=True)):
            groups[key].append(i)
        for key, idx in groups.items():
            self.pending[key].append(table.take(pa.array(idx)))
            have = sum(t.num_rows for t in self.pending[key])
            if have == self.pending[key][0].column("__slice_rows")[0].as_py():
                records.append(json.dumps(self._write(*key, self.pending.pop(key))))
        return pa.table({"record": pa.array(records, pa.string())})

    def _write(self, block: str, offset: int, pieces: list[pa.Table]) -> dict[str, Any]:
        part = pa.concat_tables(pieces).sort_by("__row")  # source order, however it arrived
        rel = f"{SHARDS}/part-{block}-{offset:010d}.parquet"
        data = part.drop_columns(list(META)).replace_schema_metadata(
            {"raycache.fingerprint": self.fingerprint}
        )
        buf = io.BytesIO()
        pq.write_table(data, buf, compression="zstd")
        blob = buf.getvalue()
        self.store.write_atomic(f"{self.dir}/{rel}", blob)
        record = {
            "path": rel,
            "rows": part.num_rows,
            "bytes": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(),
            "source": part.column("__source")[0].as_py(),
            "block": block,
            "offset": offset,
            "source_rows": part.column("__source_rows")[0].as_py(),
            "dims": {
                f.name: f.type.list_size for f in data.schema if pa.types.is_fixed_size_list(f.type)
            },
        }
        self.store.write_json(f"{self.dir}/{PROGRESS}/{rel.rsplit('/', 1)[1]}.json", record)
        return record


def _finished_blocks(p: Plan) -> dict[str, list[dict[str, Any]]]:
    """Records of the source blocks an earlier, interrupted fill already wrote in full."""
    by_block: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name in p.store.listdir(f"{p.dir}/{PROGRESS}"):
        if name.endswith(".json"):
            record = p.store.read_json(f"{p.dir}/{PROGRESS}/{name}")
            if p.store.exists(f"{p.dir}/{record['path']}"):
                by_block[record["block"]].append(record)
    return {
        b: rs for b, rs in by_block.items() if sum(r["rows"] for r in rs) == rs[0]["source_rows"]
    }


def _check_complete(p: Plan, todo: list[sources.SourceFile], records: list[dict]) -> None:
    rows: dict[str, int] = defaultdict(int)
    for r in records:
        rows[r["block"]] += r["rows"]
    totals = {r["block"]: r["source_rows"] for r in records}
    bad = [f.uri for f in todo if rows.get(f.block, 0) != totals.get(f.block, 0)]
    if bad:
        raise RaycacheError(
            f"fill of {p.cfg.name}/{p.fingerprint} wrote incomplete shards for {bad}; no manifest "
            "was written. Run the fill again: it resumes and redoes only those files"
        )


def _commit(p: Plan, records: list[dict[str, Any]], seconds: float) -> Manifest:
    records = sorted(records, key=lambda r: (r["source"], r["offset"]))
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
            ShardEntry(r["path"], r["rows"], r["bytes"], r["sha256"], r["source"])
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
