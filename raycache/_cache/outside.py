"""What a reader outside raycache needs to read exactly a version's rows: the shard files it reads
whole, and a Parquet list of the rows it reads from the rest (files it shares in part)."""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raycache._cache.entry_rows import folder_of, kept_index, reads_whole
from raycache._cache.records import ShardEntry
from raycache._errors import CorruptShard

__all__ = ["KEPT_ROWS", "KEPT_ROWS_FILE", "file_of", "in_part", "kept_rows", "kept_rows_blob",
           "read_whole"]

KEPT_ROWS = "kept_rows"
"""The key in a manifest's `extra` of its kept-rows list: path, bytes, sha256, rows and files
(in `extra`, so that every raycache that reads format 5 still reads the manifest)."""
KEPT_ROWS_FILE = re.compile(r"kept-[0-9a-f]{16}\.parquet")
"""The name of a kept-rows list in a cache folder (named by its content)."""
SCHEMA = pa.schema([("file", pa.string()), ("row", pa.int64())])


def file_of(name: str, fingerprint: str, entry: ShardEntry) -> str:
    """An entry's file relative to the store root: `<name>/<fingerprint>/shards/...`."""
    return f"{folder_of(entry, f'{name}/{fingerprint}')}/{entry.path}"


def read_whole(entries: Sequence[ShardEntry]) -> list[ShardEntry]:
    """The entries whose every row the version reads (no selection)."""
    return [e for e in entries if reads_whole(e)]


def in_part(entries: Sequence[ShardEntry]) -> list[ShardEntry]:
    """The entries of which the version reads only the rows its selection keeps."""
    return [e for e in entries if not reads_whole(e)]


def kept_rows(name: str, fingerprint: str, entries: Sequence[ShardEntry],
              prefix: str = "", encoded: bool = False) -> pa.Table:
    """(file, row): each row the version reads from the files it reads in part, `file` the
    file relative to the store root (with `prefix` before it, e.g. the store's URL and a "/"),
    `row` its place in the file (0-based, as DuckDB's file_row_number and Polars' row index
    count; `encoded`: `file` dictionary-encoded, no string per row). CorruptShard where a
    selection does not fit its file."""
    names, counts, rows = [], [], []
    for e in in_part(entries):
        try:
            where = kept_index(e)
        except ValueError as exc:
            label = f"{name}/{fingerprint}"
            raise CorruptShard(
                f"cache {label}: the row selection (`keep`) of {file_of(name, fingerprint, e)} "
                f"in its shard list cannot be read ({exc}); re-encode it with `raycache repair "
                f"{label}`", e.path, label, ("selection",)) from None
        names.append(prefix + file_of(name, fingerprint, e))
        counts.append(len(where))
        rows.append(where.astype(np.int64))
    if not names:
        return SCHEMA.empty_table()
    index = np.repeat(np.arange(len(names), dtype=np.int32), counts)  # no string per row
    file = pa.DictionaryArray.from_arrays(pa.array(index), pa.array(names, pa.string()))
    return pa.table([file if encoded else file.cast(pa.string()),
                     pa.array(np.concatenate(rows))], ["file", "row"])


def kept_rows_blob(name: str, fingerprint: str, entries: Sequence[ShardEntry]
                   ) -> tuple[bytes, dict[str, Any]] | None:
    """The kept-rows list as Parquet bytes (file dictionary-encoded, sorted by file and row)
    and its record for the manifest; None where the version reads every file whole."""
    table = kept_rows(name, fingerprint, entries, encoded=True)
    if not table.num_rows:
        return None
    sink = io.BytesIO()  # `file` read back as plain strings (no Arrow schema stored)
    pq.write_table(table, sink, compression="zstd", use_dictionary=["file"], store_schema=False,
                   column_encoding={"row": "DELTA_BINARY_PACKED"})
    blob = sink.getvalue()
    digest = hashlib.sha256(blob).hexdigest()
    return blob, {"path": f"kept-{digest[:16]}.parquet", "bytes": len(blob), "sha256": digest,
                  "rows": table.num_rows, "files": len(in_part(entries))}
