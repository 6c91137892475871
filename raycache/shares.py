"""Where a worker keeps its share of the cache during training: in memory, or streamed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from raycache.runspec import RunSpec
from raycache.split import split

__all__ = ["InMemory", "Streamed", "ToArrays", "load_share", "to_arrays"]

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


def to_arrays(batch: pa.Table, encoders: tuple[str, ...], label: str) -> tuple[np.ndarray, ...]:
    """Concatenated embedding columns as float32 features, and the label column as int64."""
    feats = []
    for name in encoders:
        col = batch.column(name).combine_chunks()
        flat = col.flatten().to_numpy(zero_copy_only=False)
        feats.append(flat.reshape(len(col), col.type.list_size))
    x = np.concatenate(feats, axis=1, dtype=np.float32) if feats else np.empty((0, 0), np.float32)
    return x, batch.column(label).to_numpy().astype(np.int64)


def load_share(spec: RunSpec, rank: int, world: int) -> pa.Table | None:
    """This worker's contiguous 1/world of the cache's rows, read straight from the store."""
    lo, hi = spec.rows * rank // world, spec.rows * (rank + 1) // world
    columns = [spec.key, spec.head.label, *spec.head.encoders]
    tables, start = [], 0
    for path, rows in spec.shards:
        end = start + rows
        if end > lo and start < hi:
            with spec.store.fs.open(path, "rb") as f:
                t = pq.read_table(f, columns=columns)
            tables.append(t.slice(max(lo - start, 0), min(hi, end) - max(lo, start)))
        start = end
    return pa.concat_tables(tables) if tables else None


class InMemory:
    """A worker's share held as two tensors (host or device memory), reshuffled every epoch."""

    def __init__(self, table: pa.Table | None, spec: RunSpec, where: torch.device):
        if table is None or table.num_rows == 0:
            self.x = torch.empty(0, spec.head.in_dim, device=where)
            self.y = torch.empty(0, dtype=torch.int64, device=where)
        else:
            x, y = to_arrays(table, spec.head.encoders, spec.head.label)
            self.x, self.y = torch.from_numpy(x).to(where), torch.from_numpy(y).to(where)

    def __len__(self) -> int:
        return len(self.y)

    def batches(self, batch_size: int, seed: int | None) -> Batches:
        n = len(self.y)
        if seed is None:
            for i in range(0, n, batch_size):
                yield self.x[i : i + batch_size], self.y[i : i + batch_size]
            return
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        order = order.to(self.x.device)
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            yield self.x[idx], self.y[idx]

    @staticmethod
    def for_worker(spec: RunSpec, rank: int, where: torch.device) -> tuple[InMemory, InMemory]:
        table = load_share(spec, rank, spec.world)
        parts = [None if table is None else
                 split(table, spec.key, spec.recipe.val_fraction, validation)
                 for validation in (False, True)]
        return InMemory(parts[0], spec, where), InMemory(parts[1], spec, where)


class ToArrays:
    """Ray Data map_batches: keep one side of the key split, as ready-made x and y arrays, so
    the training step receives tensors with no per-batch conversion."""

    def __init__(self, key: str, fraction: float, validation: bool,
                 encoders: tuple[str, ...], label: str):
        self.key, self.fraction, self.validation = key, fraction, validation
        self.encoders, self.label = encoders, label

    def __call__(self, table: pa.Table) -> dict[str, np.ndarray]:
        x, y = to_arrays(split(table, self.key, self.fraction, self.validation),
                         self.encoders, self.label)
        return {"x": x, "y": y}


class Streamed:
    """A worker's share streamed from the store each epoch through Ray Data, prefetching."""

    def __init__(self, shard: Any, spec: RunSpec, device: torch.device):
        self.shard, self.spec, self.device = shard, spec, device
        self.rows: int | None = None

    def __len__(self) -> int:
        return self.rows or 0

    def batches(self, batch_size: int, seed: int | None) -> Batches:
        shuffle = {} if seed is None else {
            "local_shuffle_buffer_size": batch_size * 8, "local_shuffle_seed": seed}
        rows = 0
        for batch in self.shard.iter_torch_batches(
            batch_size=batch_size, prefetch_batches=self.spec.prefetch_batches,
            device=self.device, dtypes={"x": torch.float32, "y": torch.int64}, **shuffle,
        ):
            rows += len(batch["y"])
            yield batch["x"], batch["y"]
        self.rows = rows
