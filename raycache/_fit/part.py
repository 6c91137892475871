"""Reading a worker's share of the cache: its pieces (shard, rows), each shard read whole and
checked, and rows as arrays (features, class ids) for training."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from raycache._cache.columns import input_column, views_column
from raycache._cache.reads import kept_of, map_ordered, read_checked, read_unchecked
from raycache._errors import RaycacheError

if TYPE_CHECKING:
    from raycache._heads.joint import Inputs
    from raycache._train.runspec import WorkerSpec

__all__ = ["Batches", "all_views", "cached_columns", "expected", "features", "label_ids",
           "load_share", "pieces", "read_piece", "rows_of", "selected", "to_arrays",
           "view_columns"]

Batches = Iterator[tuple["torch.Tensor | Inputs", torch.Tensor]]


def to_arrays(batch: pa.Table, encoders: tuple[str, ...], label: str,
              names: tuple[str, ...] = (), keep: np.ndarray | None = None
              ) -> tuple[np.ndarray, ...]:
    """Concatenated embedding columns as float32 features, and the label column as int64
    class ids (see label_ids); with `keep` (a boolean mask), only those rows."""
    y = label_ids(batch.column(label), names)
    return features(batch, encoders, keep), y if keep is None else y[keep]


def label_ids(column: pa.ChunkedArray | pa.Array, names: tuple[str, ...] = ()) -> np.ndarray:
    """A label column as int64 class ids: a named label's values by their place in `names`
    (the head's class names), an integer label as it is."""
    if not names:
        return column.to_numpy().astype(np.int64)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    ids = pc.index_in(column, value_set=pa.array(names, column.type))
    if ids.null_count:
        unknown = pc.filter(column, pc.is_null(ids)).unique().to_pylist()[:5]
        raise RaycacheError(f"label values {unknown} are not among the run's classes "
                            f"{list(names)[:10]}; the cache changed under the run: train again")
    return ids.to_numpy().astype(np.int64)


def features(batch: pa.Table, encoders: tuple[str, ...], keep: np.ndarray | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
    """The embedding columns, concatenated in order, as float32 rows (with `keep`, a boolean
    mask, only those rows): a read-only view of the Arrow buffer where one float32 column in
    one chunk allows it (callers copy what they keep), else one array filled chunk by chunk (one
    copy, however many shards the table holds, into `out` if given, else in Arrow's memory
    pool: a load of gigabytes reuses the pages of the one before instead of faulting in fresh
    ones)."""
    columns = [batch.column(name) for name in encoders]
    if out is None and keep is None and len(columns) == 1 and columns[0].num_chunks == 1 \
            and columns[0].type.value_type == pa.float32():
        col = columns[0].chunk(0)
        return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
    dims = [c.type.list_size for c in columns]
    rows = batch.num_rows if keep is None else int(np.count_nonzero(keep))
    x = out if out is not None else \
        np.frombuffer(pa.allocate_buffer(rows * sum(dims) * 4), np.float32).reshape(rows, sum(dims))
    lo = 0
    for col, dim in zip(columns, dims, strict=True):
        row = at = 0
        for chunk in col.chunks:
            flat = chunk.flatten().to_numpy(zero_copy_only=False).reshape(len(chunk), dim)
            if keep is None:
                x[row:row + len(chunk), lo:lo + dim] = flat
                row += len(chunk)
            else:
                part = keep[at:at + len(chunk)]
                n = int(np.count_nonzero(part))
                if flat.dtype == x.dtype and len(dims) == 1:  # one copy, straight in
                    np.compress(part, flat, axis=0, out=x[row:row + n])
                else:
                    x[row:row + n, lo:lo + dim] = flat[part]
                row += n
            at += len(chunk)
        lo += dim
    return x


def view_columns(spec: WorkerSpec) -> list[str]:
    """The views columns a run trains on (none when it uses no views)."""
    return [views_column(e) for e in spec.head.encoders if e in spec.view_encoders]


def all_views(batch: pa.Table, spec: WorkerSpec) -> np.ndarray:
    """Every row's K views as float32 (rows, K, in_dim), the encoders concatenated in order; an
    encoder without views gives its clean embedding to every view."""
    k, parts = spec.views, []
    for name in spec.head.encoders:
        col = batch.column(views_column(name) if name in spec.view_encoders else name)
        col = col.combine_chunks()
        flat = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
        per = flat.reshape(len(col), k, -1) if name in spec.view_encoders else \
            np.broadcast_to(flat[:, None, :], (len(col), k, flat.shape[1]))
        parts.append(per)
    return np.concatenate(parts, axis=2, dtype=np.float32)


def load_share(spec: WorkerSpec, rank: int, world: int) -> pa.Table | None:
    """This worker's contiguous 1/world of the cache's rows, read straight from the store (each
    shard whole and checked against the manifest when the spec carries checks), in parallel."""
    columns = [spec.key, spec.head.label, *cached_columns(spec), *view_columns(spec)]
    checks = expected(spec)
    tables = list(map_ordered(
        lambda p: read_piece(spec, p[0], columns, checks.get(p[0])).slice(p[1], p[2] - p[1]),
        pieces(spec, rank, world)))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def cached_columns(spec: WorkerSpec) -> list[str]:
    """The shard columns a worker reads besides key and label: the frozen encoders' embeddings,
    and the trainable encoders' inputs."""
    return [*spec.head.frozen, *(input_column(e) for e in spec.head.trainable)]


def rows_of(table: pa.Table, spec: WorkerSpec, rows: np.ndarray | None = None
            ) -> tuple[torch.Tensor | Inputs, torch.Tensor]:
    """A table's `rows` (all: None; row numbers, or a boolean mask) as (model inputs, labels):
    the frozen features as one float32 tensor, or with trainable encoders as Inputs
    (raycache._heads.joint)."""
    keep = rows if rows is not None and rows.dtype == np.bool_ else None
    x, y = to_arrays(table, spec.head.frozen, spec.head.label, spec.head.class_names, keep)
    if rows is not None and keep is None:
        x, y = np.take(x, rows, axis=0), y[rows]
    if not spec.head.trainable:  # np.take copied; a whole table's x may be a read-only view
        return (torch.from_numpy(x) if x.flags.writeable else torch.tensor(x)), \
            torch.from_numpy(y)
    from raycache._heads.joint import inputs

    if rows is not None:
        table = table.filter(pa.array(keep)) if keep is not None else table.take(pa.array(rows))
    return inputs(table, spec.head, x), torch.from_numpy(y)


def expected(spec: WorkerSpec) -> dict[str, tuple[int, str]]:
    """Each shard path's (bytes, sha256) from the manifest; empty where the run reads unchecked."""
    if not spec.checks:
        return {}
    return {path: check for (path, _), check in zip(spec.shards, spec.checks, strict=True)}


def read_piece(spec: WorkerSpec, path: str, columns: list[str],
               check: tuple[int, str] | None) -> pa.Table:
    """A shard read whole and checked against (bytes, sha256) (CorruptShard on a mismatch); with
    no check, only `columns`; either way only the rows its version keeps."""
    label = f"{spec.head.cache}/{spec.head.fingerprint}"
    if check is not None:
        table = read_checked(spec.store, path, *check, label, columns)
    else:
        table = read_unchecked(spec.store, path, columns, label)
    return selected(spec, path, table)


def selected(spec: WorkerSpec, path: str, table: pa.Table) -> pa.Table:
    """A shard's rows that the cache's version keeps (a shard it shares in part with an older
    version: raycache._cache.selection), or all of them; a CorruptShard where the file holds
    another number of rows than its entry says."""
    keep = spec.selections.get(path)
    if not keep and path in spec.rows_of:  # a committed whole entry: its row count checked
        keep = ("", spec.rows_of[path])  # (a shard landing in a first pass has no entry yet)
    return kept_of(spec.store, path, f"{spec.head.cache}/{spec.head.fingerprint}", table,
                   *keep) if keep else table


def pieces(spec: WorkerSpec, rank: int, world: int) -> list[tuple[str, int, int]]:
    """(shard path, first row, end row) of this worker's contiguous 1/world of the rows."""
    lo, hi = spec.rows * rank // world, spec.rows * (rank + 1) // world
    out, start = [], 0
    for path, rows in spec.shards:
        end = start + rows
        if end > lo and start < hi:
            out.append((path, max(lo - start, 0), min(hi, end) - start))
        start = end
    return out
