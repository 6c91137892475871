"""Export to one Parquet file: key, labels and each encoder's vectors as FixedSizeList<float>
[dim], written shard by shard under a temporary name beside the target and moved over it last
(`target`: the old file stays until the new one is whole), on any fsspec store (or to a binary
stream, such as stdout).

pyarrow and Polars read the vectors back as fixed-size lists (Polars: Array[Float32, dim]);
DuckDB as a FLOAT[] list (Parquet itself has no fixed-size list), `column::FLOAT[dim]` being
its fixed-size array. With `tensor`, the vectors are Arrow's fixed_shape_tensor (the same
bytes, the type in the file's Arrow schema): Ray Data reads each as one 2-D array."""

from __future__ import annotations

import posixpath
from typing import Any, BinaryIO

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from raycache._errors import ConfigError, RaycacheError
from raycache._export import target
from raycache._export.rows import Rows
from raycache._export.target import TEMP

__all__ = ["TEMP", "check", "write"]


def check(to: str, options: dict[str, Any], overwrite: bool) -> list[str]:
    """What is wrong with the target before anything is read: its bucket does not exist, it
    exists (without overwrite), it is a folder."""
    fs, path = fsspec.core.url_to_fs(to, **options)
    if problems := target.bucket_problem(fs, path, to):
        return problems
    if fs.exists(path) and not overwrite:
        return [f"export target {to!r} exists; pass overwrite=True (--overwrite) to replace "
                "it, or name another file"]
    if fs.isdir(path):
        return [f"export target {to!r} is a folder; name a file, e.g. {to.rstrip('/')}"
                "/rows.parquet"]
    return []


def _options(schema: pa.Schema) -> dict[str, Any]:
    """Vectors plain (floats barely compress), no statistics on them; keys and labels with
    dictionaries, zstd and statistics (as fill writes shards)."""
    vectors = [f.name for f in schema if pa.types.is_fixed_size_list(
        f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type)]
    other = [f.name for f in schema if f.name not in vectors]
    return {"compression": {f.name: "none" if f.name in vectors else "zstd" for f in schema},
            "use_dictionary": other, "write_statistics": other}


def _stream(rows: Rows, sink: Any) -> int:
    """Every shard of `rows` written to `sink` as it comes; the rows written."""
    writer, n = None, 0
    try:
        for table in rows.tables():
            if writer is None:
                writer = pq.ParquetWriter(sink, table.schema, **_options(table.schema))
            writer.write_table(table)
            n += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        raise RaycacheError(f"cache {rows.label} has no shards: there are no rows to export")
    return n


def write(rows: Rows, to: str | BinaryIO, options: dict[str, Any], overwrite: bool,
          **_: Any) -> dict[str, Any]:
    """Write the Parquet file (or stream); its URI, rows and bytes. The stale temporary files
    of killed exports to the same file are swept first."""
    if not isinstance(to, str):  # a stream: written as it comes, nothing to move
        n = _stream(rows, to)
        return {"to": "-", "rows": n, "bytes": None}
    problems = check(to, options, overwrite)
    if problems:
        raise ConfigError(problems)
    fs, path = fsspec.core.url_to_fs(to, **options)
    target.make_folder(fs, posixpath.dirname(path), to)
    target.sweep(fs, path)
    temp = target.temp_path(path)
    try:
        try:
            f = fs.open(temp, "wb")
        except OSError as exc:
            raise target.unwritable(to, exc) from None
        with f:
            n = _stream(rows, f)
        if n != rows.rows:
            raise RaycacheError(f"export of {rows.label} wrote {n} rows, its manifest says "
                                f"{rows.rows}; nothing was written to {to!r}; `raycache "
                                f"verify {rows.label}` checks the cache")
        target.replace(fs, temp, path)
    finally:
        if fs.exists(temp):
            fs.rm(temp)
    return {"to": to, "rows": n, "bytes": fs.size(path)}
