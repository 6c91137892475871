"""Where a worker keeps its share of the cache during training: in memory, or streamed."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from raycache.runspec import RunSpec
from raycache.split import split, validation_mask

__all__ = ["InMemory", "Streamed", "load_share", "pieces", "to_arrays"]

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
    columns = [spec.key, spec.head.label, *spec.head.encoders]
    tables = []
    for path, start, stop in pieces(spec, rank, world):
        with spec.store.fs.open(path, "rb") as f:
            tables.append(pq.read_table(f, columns=columns).slice(start, stop - start))
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


class Streamed:
    """A worker's share read from the store piece by piece on every pass, never all in memory:
    a background thread reads `prefetch_batches` pieces ahead; the key split of each piece is
    computed once and kept (a byte per row), not redone every epoch."""

    def __init__(self, spec: RunSpec, rank: int, validation: bool, device: torch.device):
        self.spec, self.validation, self.device = spec, validation, device
        self.pieces = pieces(spec, rank, spec.world)
        self.masks: dict[int, np.ndarray] = {}
        self.rows = 0
        self.fs = spec.store.pyarrow_fs()  # native for local folders and S3-like via fsspec

    def __len__(self) -> int:
        return self.rows

    def read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        path, start, stop = self.pieces[i]
        spec = self.spec
        columns = [spec.key, spec.head.label, *spec.head.encoders]
        table = pq.read_table(path, columns=columns, filesystem=self.fs)
        table = table.slice(start, stop - start)
        if i not in self.masks:
            self.masks[i] = np.asarray(validation_mask(table.column(spec.key),
                                                       spec.recipe.val_fraction))
        keep = self.masks[i] if self.validation else ~self.masks[i]
        x, y = to_arrays(table.filter(pa.array(keep)), spec.head.encoders, spec.head.label)
        return torch.from_numpy(x), torch.from_numpy(y)

    def batches(self, batch_size: int, seed: int | None) -> Batches:
        order = list(range(len(self.pieces)))
        if seed is not None:
            order = torch.randperm(len(order), generator=torch.Generator().manual_seed(seed))
            order = order.tolist()
        rows = 0
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead = [pool.submit(self.read, i) for i in order[: self.spec.prefetch_batches]]
            for k in range(len(order)):
                x, y = ahead.pop(0).result()
                nxt = k + self.spec.prefetch_batches
                if nxt < len(order):
                    ahead.append(pool.submit(self.read, order[nxt]))
                if seed is not None:
                    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed + k))
                    x, y = x[perm], y[perm]
                rows += len(y)
                for j in range(0, len(y), batch_size):
                    yield x[j : j + batch_size], y[j : j + batch_size]
        self.rows = rows


def pieces(spec: RunSpec, rank: int, world: int) -> list[tuple[str, int, int]]:
    """(shard path, first row, end row) of this worker's contiguous 1/world of the rows."""
    lo, hi = spec.rows * rank // world, spec.rows * (rank + 1) // world
    out, start = [], 0
    for path, rows in spec.shards:
        end = start + rows
        if end > lo and start < hi:
            out.append((path, max(lo - start, 0), min(hi, end) - start))
        start = end
    return out
