"""Export to a Lance dataset (pylance, where installed): the same columns as the Parquet export,
written from the stream of shards (Lance commits a dataset version last: a write that fails
leaves no version to read), with an optional IVF_PQ vector index on the first encoder."""

from __future__ import annotations

import itertools
import math
from typing import Any

import fsspec
import pyarrow as pa

from raycache._core.extras import lacking
from raycache._errors import ConfigError, RaycacheError
from raycache._export.rows import Rows
from raycache._export.target import bucket_problem

__all__ = ["check", "index_settings", "write"]


def check(to: str, options: dict[str, Any], overwrite: bool) -> list[str]:
    """What is wrong before anything is read: no pylance, its bucket does not exist, or the
    dataset exists."""
    if lack := lacking("lance", "format 'lance'"):
        return lack
    fs, path = fsspec.core.url_to_fs(to, **options)
    if problems := bucket_problem(fs, path, to):
        return problems
    if fs.exists(path) and not overwrite:
        return [f"export target {to!r} exists; pass overwrite=True (--overwrite) to replace "
                "it, or name another folder"]
    return []


def index_settings(rows: int, dim: int) -> dict[str, int]:
    """IVF partitions (about the square root of the rows, at most 256) and PQ sub-vectors (a
    divisor of `dim`, about one per 16 numbers)."""
    subs = next(d for d in (dim // 16, dim // 8, dim // 4, dim // 2, 1) if d and dim % d == 0)
    return {"num_partitions": max(1, min(256, int(math.sqrt(rows)))), "num_sub_vectors": subs}


def write(rows: Rows, to: str, options: dict[str, Any], overwrite: bool,
          index: bool = False, **_: Any) -> dict[str, Any]:
    """Write the dataset (and its index); its URI and rows."""
    import lance

    problems = check(to, options, overwrite)
    if problems:
        raise ConfigError(problems)
    tables = rows.tables()
    first = next(tables, None)
    if first is None:
        raise RaycacheError(f"cache {rows.label} has no shards: there are no rows to export")
    batches = (b for t in itertools.chain([first], tables) for b in t.to_batches())
    reader = pa.RecordBatchReader.from_batches(first.schema, batches)
    dataset = lance.write_dataset(reader, to, mode="overwrite" if overwrite else "create",
                                  storage_options=options or None)
    if index:
        column, dim = next(iter(rows.vectors.items()))
        dataset.create_index(column, index_type="IVF_PQ", metric="cosine",
                             **index_settings(rows.rows, dim))
    return {"to": to, "rows": dataset.count_rows(), "bytes": None}
