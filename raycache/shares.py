"""Where a worker keeps its share of the cache during training: in memory, or streamed."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

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
    if len(feats) == 1 and feats[0].dtype == np.float32:
        x = feats[0]  # a read-only view of the Arrow buffer: callers copy what they keep
    else:
        x = (np.concatenate(feats, axis=1, dtype=np.float32) if feats
             else np.empty((0, 0), np.float32))
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
            self.x, self.y = torch.tensor(x, device=where), torch.from_numpy(y).to(where)

    def __len__(self) -> int:
        return len(self.y)

    def batches(self, batch_size: int, seed: int | None, then: int | None = None) -> Batches:
        """One pass in an order drawn from `seed` (None: as stored); `then` is unused here."""
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
    """A worker's share read from the store piece by piece on every pass, never all in memory.

    One background thread per share reads `prefetch_batches` pieces ahead, across passes too:
    when a pass ends, the next one's first pieces are already being read (for training, the
    caller names the next pass's seed with `then`). The key split of each piece is computed
    on the first read and kept (a byte per row); later reads skip the key column.
    """

    def __init__(self, spec: RunSpec, rank: int, validation: bool, device: torch.device):
        self.spec, self.validation, self.device = spec, validation, device
        self.pieces = pieces(spec, rank, spec.world)
        self.masks: dict[int, np.ndarray] = {}
        self.rows = 0
        self.fs = spec.store.pyarrow_fs()  # native for local folders and S3-like via fsspec
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raycache-stream")
        self.ahead: tuple[int | None, list[Future]] | None = None
        """(seed, reads under way) of the next pass, started when the last one ended."""

    def __len__(self) -> int:
        return self.rows

    def read(self, i: int, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Piece i's rows of this split, shuffled by `seed` (None: in stored order)."""
        path, start, stop = self.pieces[i]
        spec = self.spec
        columns = [spec.head.label, *spec.head.encoders]
        first = i not in self.masks
        table = pq.read_table(path, columns=[spec.key, *columns] if first else columns,
                              filesystem=self.fs).slice(start, stop - start)
        if first:
            self.masks[i] = np.asarray(validation_mask(table.column(spec.key),
                                                       spec.recipe.val_fraction))
        rows = np.flatnonzero(self.masks[i] if self.validation else ~self.masks[i])
        if seed is not None:
            rows = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)
                                       ).numpy()]
        x, y = to_arrays(table, spec.head.encoders, spec.head.label)
        return torch.from_numpy(np.take(x, rows, axis=0)), torch.from_numpy(y[rows])

    def order(self, seed: int | None) -> list[int]:
        if seed is None:
            return list(range(len(self.pieces)))
        return torch.randperm(len(self.pieces), generator=torch.Generator().manual_seed(seed)
                              ).tolist()

    def submit(self, order: list[int], k: int, seed: int | None) -> Future:
        """Read the k-th piece of a pass in the background (rows shuffled by seed + k)."""
        return self.pool.submit(self.read, order[k], None if seed is None else seed + k)

    def start(self, seed: int | None) -> list[Future]:
        order = self.order(seed)
        return [self.submit(order, k, seed)
                for k in range(min(self.spec.prefetch_batches, len(order)))]

    def batches(self, batch_size: int, seed: int | None, then: int | None = None) -> Batches:
        """One pass: pieces in an order drawn from `seed` (None: as stored, unshuffled), rows
        shuffled within each piece; `then` is the next pass's seed (training's next epoch)."""
        order = self.order(seed)
        ready, self.ahead = self.ahead, None
        ahead = ready[1] if ready is not None and ready[0] == seed else self.start(seed)
        rows = 0
        for k in range(len(order)):
            x, y = ahead.pop(0).result()
            nxt = k + self.spec.prefetch_batches
            if nxt < len(order):
                ahead.append(self.submit(order, nxt, seed))
            rows += len(y)
            if k == len(order) - 1 and (seed is None or then is not None):
                nxt_seed = None if seed is None else then  # read ahead for the next pass
                self.ahead = (nxt_seed, self.start(nxt_seed))
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
