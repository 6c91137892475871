"""FILL: read the source, prepare and encode it in Ray Data stages (or, for a small CPU fill,
the same stages in this process), write shards, commit."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raycache.cache.columns import input_column
from raycache.cache.committed import Cache, read_manifest
from raycache.cache.manifest import EncoderEntry, Manifest, ShardEntry, human_bytes
from raycache.cache.store import MANIFEST, PROGRESS
from raycache.compute import runner
from raycache.compute.pool import Pool
from raycache.compute.runner import AUTO_IN_PROCESS_ROWS, Job, Stage
from raycache.errors import RaycacheError
from raycache.fill.config import FillConfig
from raycache.fill.keys import scan
from raycache.fill.plan import Plan, load_config, plan
from raycache.source import files as sources

if TYPE_CHECKING:
    from raycache.fill.reuse import Reuse

__all__ = ["AUTO_IN_PROCESS_ROWS", "FillResult", "build_pipeline", "complete", "fill",
           "in_process", "job", "manifest_of", "resumable", "run_in_process"]


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


def complete(p: Plan, done: list[dict[str, Any]], *, replace: bool = False) -> FillResult:
    """Encode every row that the shard records `done` do not cover, check, and commit (with
    `replace`, over a committed manifest: a repair)."""
    from raycache.compute.pool import local_pool

    cfg = p.cfg
    start = time.perf_counter()
    resumed = sum(r["rows"] for r in done)
    units, totals = sources.plan_units(p.files, p.format, cfg.source.options, cfg.rows_per_shard,
                                       _done_ranges(done))
    todo = sum(u.todo() or 0 for u in units) if p.format == "parquet" else None
    blocks = None if todo is None else -(-todo // cfg.rows_per_shard)
    local = in_process(cfg, todo)
    if local:
        pool = local_pool(cfg)
    else:
        from raycache.compute.cluster import cluster_pool

        pool = cluster_pool(cfg, blocks, progress=cfg.progress, verbose=cfg.verbose,
                            store=p.store)
    new: list[dict[str, Any]] = []
    first = None
    if units:
        reuse = _reuse(p) if cfg.reuse else None
        records = _records(runner.run(job(p, units, reuse), pool, local=local))
        with runner.progress_bar(cfg.progress, todo, f"fill {cfg.name}") as bar:
            for record in records:
                first = first or time.perf_counter() - start
                new.append(record)
                bar.update(record["rows"])
    records = done + new
    _check_complete(p, records, totals)
    records, label_stats = scan(p.store, p.dir, records, p.cfg.source.key, p.cfg.source.duplicates,
                                [c for c in p.cfg.source.labels
                                 if pa.types.is_integer(p.schema.field(c).type)], p.cfg.name)
    reused = sum(r.get("reused", 0) for r in new)
    by = {e.name: sum(r.get("encoded", {}).get(e.name, r["rows"]) for r in new)
          for e in cfg.encoders if not e.trainable}
    encoded = sum(r["rows"] for r in new) - reused
    encode_s = (max(r["written"] for r in new) - min(r["encode_started"] for r in new)
                if new else 0.0)
    manifest, committed = _commit(p, records, time.perf_counter() - start, replace, label_stats)
    if not committed:  # another fill of this cache committed first: that cache is the result
        return FillResult(Cache(p.store, manifest), True, time.perf_counter() - start, 0)
    where = runner.where(pool, local)
    return FillResult(Cache(p.store, manifest), False, time.perf_counter() - start, encoded,
                      resumed_rows=resumed, reused_rows=reused, first_shard_seconds=first or 0.0,
                      encode_seconds=encode_s, pool=where, encoded_by=by)


def in_process(cfg: FillConfig, todo: int | None) -> bool:
    """Whether the fill runs its stages in this process (see FillConfig.in_process)."""
    return runner.in_process(cfg.in_process, cpu=cfg.num_gpus == 0, concurrency=cfg.concurrency,
                             small=todo is not None and todo <= AUTO_IN_PROCESS_ROWS)


def _reuse(p: Plan) -> Reuse | None:
    """What the store's other committed caches hold for this fill's encoders (see
    raycache.fill.reuse)."""
    from raycache.cache.committed import ls
    from raycache.fill.reuse import Reuse

    return Reuse.scan(p.store, [e for e in p.cfg.encoders if not e.trainable],
                      p.inputs["encoders"],
                      [c.manifest for c in ls(p.store) if c.dir != p.dir])


def job(p: Plan, units: list[sources.Unit], reuse: Reuse | None = None) -> Job:
    """The fill for the stage runner: read units -> prepare (tokenise; reuse, views) -> encoder
    actor pool -> write shards, whose records (JSON) are its output."""
    from raycache.fill.shards import write_stage
    from raycache.fill.stages import EncodeActor, FillPrepare

    cfg = p.cfg
    digests = {k: v["weights_digest"] for k, v in p.inputs["encoders"].items()}
    return Job(units, p.format, cfg.source.options, cfg.rows_per_shard, cfg.encoders,
               keep=list(dict.fromkeys([cfg.source.key, *cfg.source.labels])),
               model=Stage(EncodeActor, dict(cfg=cfg, digests=digests), local=dict(lazy=True)),
               inputs=FillPrepare(cfg.encoders, reuse, cfg.views),
               sink=Stage(write_stage, dict(store=p.store, cache_dir=p.dir,
                                            fingerprint=p.fingerprint, rows=cfg.rows_per_shard)))


def run_in_process(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None
                   ) -> Iterator[dict]:
    """The fill's stages called in this process: the same shards and records as on Ray."""
    return _records(runner.run_local(job(p, units, reuse), pool))


def build_pipeline(p: Plan, units: list[sources.Unit], pool: Pool, reuse: Reuse | None = None
                   ) -> Any:
    """The fill as a lazy Ray Data dataset of shard records (nothing runs until consumed)."""
    return runner.build(job(p, units, reuse), pool)


def _records(tables: Iterator[pa.Table]) -> Iterator[dict[str, Any]]:
    """Shard records as the writers finish them."""
    for table in tables:
        for text in table.column("record").to_pylist():
            yield json.loads(text)


def resumable(p: Plan) -> list[dict[str, Any]]:
    """Records of the shards an earlier, interrupted fill of this fingerprint wrote."""
    out = []
    for name in p.store.listdir(f"{p.dir}/{PROGRESS}"):
        if name.endswith(".json"):
            try:  # another fill of this cache may commit (and clear the records) meanwhile
                record = p.store.read_json(f"{p.dir}/{PROGRESS}/{name}")
            except FileNotFoundError:
                continue
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


SHARD_LIST = re.compile(r"shards-[0-9a-f]{16}\.json")


def _commit(p: Plan, records: list[dict[str, Any]], seconds: float, replace: bool = False,
            label_stats: dict[str, Any] | None = None) -> tuple[Manifest, bool]:
    """Write the manifest, exclusively: (the manifest, True), or, when another fill of the same
    cache committed first, (that fill's manifest, False). `replace` writes over it (repair)."""
    manifest = manifest_of(p, records, seconds, label_stats)
    # the shard list first, named by its content (two fills of one cache write the same
    # object), then the manifest that names it and its checksum: the commit
    listing = (json.dumps([dataclasses.asdict(s) for s in manifest.shards], sort_keys=True,
                          separators=(",", ":")) + "\n").encode()
    digest = hashlib.sha256(listing).hexdigest()
    manifest.shard_list = {"path": f"shards-{digest[:16]}.json", "bytes": len(listing),
                           "sha256": digest}
    manifest.totals = {"rows": manifest.rows, "bytes": manifest.bytes,
                       "shards": len(manifest.shards)}
    p.store.write_atomic(f"{p.dir}/{manifest.shard_list['path']}", listing)
    committed = p.store.write_json(f"{p.dir}/{MANIFEST}", manifest.head(), exclusive=not replace)
    if not committed:
        manifest = read_manifest(p.store, p.dir)
    _clear_progress(p)
    for name in p.store.listdir(p.dir):  # a repair's earlier shard list, or a losing fill's
        if SHARD_LIST.fullmatch(name) and name != manifest.shard_list.get("path"):
            p.store.rm(f"{p.dir}/{name}")  # never another fill's temporary file: it renames it
    return manifest, committed


def _clear_progress(p: Plan, attempts: int = 3) -> None:
    """Remove the progress records once committed. Another fill of the same cache may still be
    writing records while they go (the folder is not empty again): retry, then leave them; they
    are inert beside a manifest and the last fill to commit clears them."""
    for _ in range(attempts):
        try:
            p.store.fs.rm(f"{p.dir}/{PROGRESS}", recursive=True)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def manifest_of(p: Plan, records: list[dict[str, Any]], seconds: float,
                label_stats: dict[str, Any] | None = None) -> Manifest:
    """The manifest of the shards `records` (in source order), not written."""
    from raycache.fill.reuse import encoder_identity

    records = sorted(records, key=lambda r: (r["ranges"][0][3], r["ranges"][0][1]))
    dims = records[0]["dims"] if records else {}
    described = p.inputs["encoders"]
    return Manifest(
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
                identity="" if e.trainable else encoder_identity(described[e.name]),
                trainable=e.trainable,
                column=input_column(e.name) if e.trainable else "",
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
        created=datetime.now(UTC).isoformat(timespec="milliseconds"),
        fill_seconds=round(seconds, 3),
        extra={"encoder_configs": {e.name: dataclasses.asdict(e) for e in p.cfg.encoders},
               **({"views": p.inputs["views"]} if "views" in p.inputs else {})},
        label_stats=label_stats or {},
    )
