"""Writing encoded rows as shards: one Parquet file and one progress record per shard, named
by the source rows it holds."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.columns import HASH_PREFIX, input_column, is_views_column
from raycache._cache.entry_rows import file_path, take_kept
from raycache._cache.reads import cache_label, read_bytes_checked
from raycache._cache.records import RowRange, ShardEntry, ShardRecord, SkippedRow
from raycache._cache.store import PROGRESS, Store, shard_name
from raycache._cache.vectors import is_packed, pack
from raycache._fill.finite import BAD
from raycache._fill.reuse import need_column
from raycache._fill.summary import summarize, summary_path

__all__ = ["DEDUP", "STARTED", "copy_kept", "rewrite", "write_stage"]

DEDUP = "-dedup-"
"""In a shard's name, before its checksum: the shard written again without duplicate keys."""

STARTED = "__encode_started"
"""When the encoder call that made a row began (seconds since the epoch)."""


def write_stage(table: pa.Table, store: Store, cache_dir: str, fingerprint: str, rows: int,
                key: str = "", labels: Sequence[str] | None = None) -> pa.Table:
    """Ray Data task: encoded rows in, written as shards of at most `rows` rows, each with its
    progress record; the records (JSON) out. Rows go in source order; a shard's name comes from
    the rows it holds. Rows marked skipped (on_bad_rows: skip) are left out, and listed in one
    more record, {"skipped": [SkippedRow JSON, ...]}, the `key` column naming them. With
    `labels` (the counted label columns), each shard's key summary (raycache._fill.summary) is
    kept beside its record and returned with it, as column "keys" (for the commit's scan)."""
    if not _in_order(table):  # a block read from one unit already is: no copy of it then
        table = table.sort_by([("__block", "ascending"), ("__row", "ascending")])
    skipped = []
    if BAD in table.column_names:
        bad = table.column(BAD).is_valid()
        skipped = _skipped(table.filter(bad), key)
        table = table.filter(pc.invert(bad)).drop_columns([BAD])
    summed = (key, list(labels)) if labels is not None and key else None
    written = [_write(table.slice(i, rows), store, cache_dir, fingerprint, summed)
               for i in range(0, table.num_rows, rows)]
    records, summaries = [r for r, _ in written], [s for _, s in written]
    if skipped:
        records.append(json.dumps({"skipped": [s.to_json() for s in skipped]}, default=str))
        summaries.append(None)
    return pa.table({"record": pa.array(records, pa.string()),
                     "keys": pa.array(summaries, pa.binary())})


def _skipped(table: pa.Table, key: str) -> list[SkippedRow]:
    """The rows of `table` (each marked skipped) as SkippedRow records."""
    keys = table.column(key).to_pylist() if key in table.column_names else \
        [None] * table.num_rows
    return [SkippedRow(*row) for row in zip(
        table.column("__block").to_pylist(), table.column("__row").to_pylist(), keys,
        table.column("__source").to_pylist(), table.column(BAD).to_pylist(), strict=True)]


def _parquet_options(schema: pa.Schema) -> dict:
    """Vector columns (packed: cache.vectors) plain: float32 embeddings barely compress (zstd
    saved nothing on MiniLM's, dictionaries made them bigger), and training reads them every
    epoch, so they are stored as raw floats that decode at memory speed. Input hashes are
    random bytes: plain too. Neither gets min/max statistics (nothing reads them; on 384 floats
    a row they cost a third of a shard's write). Keys and labels get dictionaries, zstd and
    statistics."""
    plain = {*_embedding_columns(schema), *(f.name for f in schema if is_packed(f)
                                            or f.name.startswith(HASH_PREFIX))}
    other = [f.name for f in schema if f.name not in plain]
    return {"compression": {f.name: "none" if f.name in plain else "zstd" for f in schema},
            "use_dictionary": other, "write_statistics": other}


def _parquet(table: pa.Table) -> pa.Buffer:
    """A shard's Parquet bytes, in an Arrow buffer (no regrowing copies, no copy into bytes)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **_parquet_options(table.schema))
    return sink.getvalue()


def _write(table: pa.Table, store: Store, cache_dir: str, fingerprint: str,
           summed: tuple[str, list[str]] | None = None) -> tuple[str, bytes | None]:
    """One shard and its progress record (and, with `summed` (key, labels), its key summary
    first): (the record's JSON, the summary's bytes)."""
    ranges = _ranges(table)
    rel = shard_name(ranges)
    data = table.drop_columns([c for c in table.column_names if c.startswith("__")])
    encoded, some = _encoded(table, data.schema)
    dims = {name: data.schema.field(name).type.list_size
            for name in _embedding_columns(data.schema)}
    vectors = [*dims, *(f.name for f in data.schema if is_views_column(f.name))]
    data = pack(data, vectors).replace_schema_metadata({"raycache.fingerprint": fingerprint})
    blob = _put(store, f"{cache_dir}/{rel}", _parquet(data), data)
    record = ShardRecord(
        path=rel,
        rows=table.num_rows,
        bytes=len(blob),
        sha256=hashlib.sha256(blob).hexdigest(),
        ranges=ranges,
        dims=dims,
        reused=int(table.num_rows - some.sum()),
        encoded=encoded,
        encode_started=float(np.min(table.column(STARTED).to_numpy())),
        written=time.time(),
    )
    summary = None
    if summed is not None:
        summary = summarize(data, *summed, rel, record.sha256).to_bytes()
        store.write_atomic(summary_path(cache_dir, rel), summary)
    store.write_json(_progress_path(cache_dir, rel), record.to_json(), compact=True)
    return json.dumps(record.to_json()), summary


def rewrite(store: Store, cache_dir: str, record: ShardRecord, keep: np.ndarray
            ) -> ShardRecord:
    """A written shard again with only rows `keep` (dropping duplicate keys), and its record.
    The new shard gets a name of its own (its rows' name, then `-dedup-` and its checksum), and
    only then the record is replaced: a crash between the two leaves the record naming the
    shard it describes, never a shard whose bytes it does not hold. The shard it replaces
    stays until the commit removes it (commit.superseded)."""
    table = pq.read_table(pa.BufferReader(store.read_bytes(f"{cache_dir}/{record.path}")))
    table = table.take(pa.array(keep))  # as stored: packed vectors stay packed
    blob = _parquet(table)
    digest = hashlib.sha256(blob).hexdigest()
    base = shard_name(record.ranges)
    path = f"{base.removesuffix('.parquet')}{DEDUP}{digest[:16]}.parquet"
    store.write_atomic(f"{cache_dir}/{path}", blob)
    out = record.replace(path=path, rows=table.num_rows, bytes=len(blob), sha256=digest,
                         written=time.time())
    store.write_json(_progress_path(cache_dir, base), out.to_json(), compact=True)
    return out


def copy_kept(store: Store, cache_dir: str, fingerprint: str, entries: list[ShardEntry],
              ranges: tuple[RowRange, ...], dims: dict[str, int]) -> ShardRecord:
    """Compaction: the kept rows of shared shards (each read whole and checked), copied as they
    are stored into one shard of this cache named by `ranges` (theirs, with source and rows),
    and its progress record: rows are copied, never encoded."""
    tables = []
    for e in entries:
        blob = read_bytes_checked(store, file_path(store, cache_dir, e), e.bytes, e.sha256,
                                  cache_label(cache_dir))
        table = pq.read_table(pa.BufferReader(blob))  # packed vectors stay packed
        tables.append(take_kept(e, table))
    table = pa.concat_tables(tables).replace_schema_metadata(
        {"raycache.fingerprint": fingerprint})
    rel = shard_name(ranges)
    blob = _put(store, f"{cache_dir}/{rel}", _parquet(table), table)
    record = ShardRecord(path=rel, rows=table.num_rows, bytes=len(blob),
                         sha256=hashlib.sha256(blob).hexdigest(), ranges=ranges, dims=dims,
                         reused=table.num_rows, encoded=dict.fromkeys(dims, 0),
                         written=time.time())
    store.write_json(_progress_path(cache_dir, rel), record.to_json(), compact=True)
    return record


def _progress_path(cache_dir: str, rel: str) -> str:
    return f"{cache_dir}/{PROGRESS}/{rel.rsplit('/', 1)[1]}.json"


def _put(store: Store, path: str, blob: pa.Buffer, data: pa.Table) -> pa.Buffer | bytes:
    """Write a shard unless one of the same rows is there (another fill of this cache running
    at once, or a writer stopped before its record): then keep that one, whose checksum a
    committed manifest may already hold, if it has the same inputs; else replace it. Returns
    the bytes at `path`."""
    if store.write_atomic(path, blob, exclusive=True):
        return blob
    there = store.read_bytes(path)
    try:
        table = pq.read_table(pa.BufferReader(there))
    except (pa.ArrowInvalid, OSError):
        table = None
    hashes = [c for c in data.column_names if c.startswith(HASH_PREFIX)]
    if table is not None and table.num_rows == data.num_rows and hashes and all(
            c in table.column_names and table.column(c).equals(data.column(c)) for c in hashes):
        return there
    store.write_atomic(path, blob)
    return blob


def _encoded(table: pa.Table, schema: pa.Schema) -> tuple[dict[str, int], np.ndarray]:
    """Rows each encoder encoded (the rest it reused), and which rows any encoder encoded
    (every row, where views were encoded)."""
    some = np.zeros(table.num_rows, bool)
    encoded = {}
    if any(is_views_column(f.name) for f in schema):
        some[:] = True  # views are encoded on every row
    for name in _embedding_columns(schema):
        need = (table.column(need_column(name)).to_numpy(zero_copy_only=False)
                if need_column(name) in table.column_names else np.ones(table.num_rows, bool))
        encoded[name] = int(need.sum())
        some |= need
    return encoded, some


def _embedding_columns(schema: pa.Schema) -> list[str]:
    """The frozen encoders' columns: fixed-size lists, but not a trainable one's input, nor
    views."""
    return [f.name for f in schema if pa.types.is_fixed_size_list(f.type)
            and not f.name.endswith(input_column("")) and not is_views_column(f.name)]


def _in_order(table: pa.Table) -> bool:
    """Whether the rows are sorted by (__block, __row)."""
    if table.num_rows < 2:
        return True
    blocks = table.column("__block").combine_chunks()
    before, after = blocks.slice(0, len(blocks) - 1), blocks.slice(1)
    if pc.any(pc.less(after, before)).as_py():
        return False
    same = pc.equal(after, before).to_numpy(zero_copy_only=False)
    return bool((np.diff(table.column("__row").to_numpy())[same] > 0).all())


def _ranges(table: pa.Table) -> tuple[RowRange, ...]:
    """The full range (with source URI and rows) of each run of consecutive rows of a file,
    from a table sorted by (__block, __row)."""
    blocks = table.column("__block").combine_chunks()
    rows = table.column("__row").to_numpy()
    change = np.ones(len(rows), bool)
    if len(rows) > 1:
        other = pc.not_equal(blocks.slice(1), blocks.slice(0, len(blocks) - 1))
        change[1:] = other.to_numpy(zero_copy_only=False) | (rows[1:] != rows[:-1] + 1)
    cuts = np.flatnonzero(change)
    ends = [*cuts[1:].tolist(), len(rows)]
    names = blocks.take(pa.array(cuts)).to_pylist()
    sources = table.column("__source").take(pa.array(cuts)).to_pylist()
    totals = table.column("__source_rows").to_numpy()[cuts]
    return tuple(RowRange(name, int(rows[a]), int(rows[b - 1]) + 1, source, int(total))
                 for name, a, b, source, total in zip(names, cuts.tolist(), ends, sources,
                                                      totals.tolist(), strict=True))
