"""Writing encoded rows as shards: one Parquet file and one progress record per shard, named
by the source rows it holds."""

from __future__ import annotations

import hashlib
import io
import json
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raycache.sources import META
from raycache.store import PROGRESS, Store, shard_name

__all__ = ["STARTED", "write_stage"]

STARTED = "__encode_started"
"""When the encoder call that made a row began (seconds since the epoch)."""


def write_stage(table: pa.Table, store: Store, cache_dir: str, fingerprint: str, rows: int
                ) -> pa.Table:
    """Ray Data task: encoded rows in, written as shards of at most `rows` rows, each with its
    progress record; the records (JSON) out. Rows go in source order; a shard's name comes from
    the rows it holds."""
    table = table.sort_by([("__block", "ascending"), ("__row", "ascending")])
    records = [_write(table.slice(i, rows), store, cache_dir, fingerprint)
               for i in range(0, table.num_rows, rows)]
    return pa.table({"record": pa.array(records, pa.string())})


def _parquet_options(schema: pa.Schema) -> dict:
    """Embedding columns plain: float32 embeddings barely compress (zstd saved nothing on
    MiniLM's, dictionaries made them bigger), and training reads them every epoch, so they are
    stored as raw floats that decode at memory speed; keys and labels get dictionaries + zstd."""
    embeddings = {f.name for f in schema if pa.types.is_fixed_size_list(f.type)}
    return {"compression": {f.name: "none" if f.name in embeddings else "zstd" for f in schema},
            "use_dictionary": [f.name for f in schema if f.name not in embeddings]}


def _write(table: pa.Table, store: Store, cache_dir: str, fingerprint: str) -> str:
    ranges = _ranges(table)
    rel = shard_name([r[:3] for r in ranges])
    data = table.drop_columns([*META, STARTED]).replace_schema_metadata(
        {"raycache.fingerprint": fingerprint}
    )
    buf = io.BytesIO()
    pq.write_table(data, buf, **_parquet_options(data.schema))
    blob = buf.getvalue()
    store.write_atomic(f"{cache_dir}/{rel}", blob)
    record = {
        "path": rel,
        "rows": table.num_rows,
        "bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
        "ranges": ranges,
        "dims": {f.name: f.type.list_size for f in data.schema
                 if pa.types.is_fixed_size_list(f.type)},
        "encode_started": float(np.min(table.column(STARTED).to_numpy())),
        "written": time.time(),
    }
    store.write_json(f"{cache_dir}/{PROGRESS}/{rel.rsplit('/', 1)[1]}.json", record)
    return json.dumps(record)


def _ranges(table: pa.Table) -> list[list[Any]]:
    """[block, start, stop, source uri, source rows] for each run of consecutive rows of a file,
    from a table sorted by (__block, __row)."""
    blocks = table.column("__block").to_pylist()
    rows = table.column("__row").to_numpy()
    sources = table.column("__source").to_pylist()
    totals = table.column("__source_rows").to_numpy()
    cuts = [0, *(i for i in range(1, len(rows))
                 if blocks[i] != blocks[i - 1] or rows[i] != rows[i - 1] + 1), len(rows)]
    return [[blocks[a], int(rows[a]), int(rows[b - 1]) + 1, sources[a], int(totals[a])]
            for a, b in zip(cuts, cuts[1:], strict=False)]
