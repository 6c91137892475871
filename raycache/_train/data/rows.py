"""A training worker's rows: its part of the cache read with the columns its head needs
(raycache._fit.part), and rows as model inputs and class ids, views included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import torch

from raycache._cache.columns import input_column, views_column
from raycache._fit.part import features, label_ids, load_part

if TYPE_CHECKING:
    from raycache._heads.joint import Inputs
    from raycache._train.runspec import WorkerSpec

__all__ = ["Batches", "Rows", "all_views", "cached_columns", "load_worker_part", "rows_of",
           "to_arrays", "view_columns"]

Batches = Iterator[tuple["torch.Tensor | Inputs", torch.Tensor]]


class Rows(Protocol):
    """A worker's training or validation rows, whatever holds them (in memory, streamed, a
    fill's shards as they land, an objective's own): what its loop and warm start ask of them."""

    overlap: str
    """Why its rows are not all there yet ("": they are, a committed cache's)."""

    def __len__(self) -> int: ...

    def batches(self, batch_size: int, seed: int | None, then: int | None = None
                ) -> Batches: ...


def to_arrays(batch: pa.Table, encoders: tuple[str, ...], label: str,
              names: tuple[str, ...] = (), keep: np.ndarray | None = None
              ) -> tuple[np.ndarray, ...]:
    """Concatenated embedding columns as float32 features, and the label column as int64
    class ids (see label_ids); with `keep` (a boolean mask), only those rows."""
    y = label_ids(batch.column(label), names)
    return features(batch, encoders, keep), y if keep is None else y[keep]


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


def load_worker_part(spec: WorkerSpec, rank: int, world: int) -> pa.Table | None:
    """This worker's contiguous 1/world of the cache's rows, read straight from the store (each
    shard whole and checked against the manifest when the spec carries checks), in parallel."""
    columns = [spec.key, spec.head.label, *cached_columns(spec), *view_columns(spec)]
    return load_part(spec.reading, columns, rank, world)


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
