"""A worker's part streamed from the store piece by piece on every pass (placement: stream)."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import torch

from raycache._cache.entry_rows import Selection
from raycache._cache.reads import read_unchecked
from raycache._fit.part import expected, label_ids, pieces, read_piece
from raycache._fit.split import validation_mask
from raycache._train.data.rows import Batches, all_views, cached_columns, rows_of, view_columns
from raycache._train.data.views import draw, row_ids
from raycache._train.runspec import WorkerSpec

if TYPE_CHECKING:
    from raycache._heads.joint import Inputs

__all__ = ["KEPT_VALIDATION_BYTES", "READERS", "Streamed", "beside_readers"]

KEPT_VALIDATION_BYTES = 1 << 30
"""A streamed part keeps its validation rows in memory, taken from the training pass's first
reads, when their features take at most this; above it, every validation pass reads the
shards again."""
READERS = 2
"""Pieces a streamed part reads at once: Parquet decoding and file reads release the GIL, so
two readers overlap each other and the training step."""



def beside_readers() -> None:
    """Leave the READERS their cores: torch's OpenMP threads spin while they wait, so a step's
    threads and the readers together must not outnumber the cores (on 2 cores, a streamed
    epoch with 2 step threads ran at 0.65 of one with 1)."""
    cores = min(torch.get_num_threads(), os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores - READERS))


class Streamed:
    """A worker's part read from the store piece by piece on every pass, never all in memory.

    Background threads (READERS) read `prefetch_batches` pieces ahead, across passes too:
    when a pass ends, the next one's first pieces are already being read (for training, the
    caller names the next pass's seed with `then`). The key split of each piece is computed
    on the first read and kept (a byte per row); later reads skip the key column. The first read
    of each piece in a run is of the whole shard, checked against the manifest (spec.checks).
    """

    overlap = ""
    """Its rows are all there (rows.Rows)."""

    def __init__(self, spec: WorkerSpec, rank: int, validation: bool, device: torch.device):
        self.spec, self.validation, self.device = spec, validation, device
        self.pieces = pieces(spec.reading, rank, spec.world)
        self.masks: dict[int, np.ndarray] = {}
        self.ids: dict[int, np.ndarray] = {}
        self.at: dict[int, np.ndarray] = {}
        """Row ids of each piece's training rows, for drawing views (runs with views only)."""
        self.checks = expected(spec.reading)
        self.rows = 0
        self.fs = spec.store.pyarrow_fs()  # native for local folders and S3-like via fsspec
        self.pool = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="raycache-stream")
        self.ahead: tuple[int | None, list[Future]] | None = None
        """(seed, reads under way) of the next pass, started when the last one ended."""
        self.kept: dict[int, tuple[torch.Tensor | Inputs, torch.Tensor]] = {}
        """Validation rows of pieces, handed over by the training side's first reads."""
        self.hands_to: Streamed | None = None
        """The validation side the training side's first reads give their validation rows."""

    @staticmethod
    def for_worker(spec: WorkerSpec, rank: int, device: torch.device
                   ) -> tuple[Streamed, Streamed]:
        """(training, validation) of this worker's part. Where the validation rows are small
        (KEPT_VALIDATION_BYTES), the training pass's first read of each piece hands them over,
        and validation passes read no shard."""
        train, val = Streamed(spec, rank, False, device), Streamed(spec, rank, True, device)
        held = spec.rows / spec.world * spec.recipe.evaluation.val_fraction
        if held * spec.head.in_dim * 4 <= KEPT_VALIDATION_BYTES:
            train.hands_to = val
        return train, val

    def __len__(self) -> int:
        return self.rows

    def read(self, i: int, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Piece i's rows of this split, shuffled by `seed` (None: in stored order)."""
        if i in self.kept:
            return self.kept[i]
        path, start, stop = self.pieces[i]
        spec = self.spec
        views = bool(spec.views) and not self.validation and seed is not None
        columns = [spec.head.label, *cached_columns(spec),
                   *(view_columns(spec) if views else [])]
        first = i not in self.masks
        at = None  # a shard read in part: the file rows of the piece's rows
        if first:  # the first read in this run: whole, checked against the manifest
            table = read_piece(spec.reading, path, [spec.key, *columns], self.checks.get(path))
            table = table.slice(start, stop - start)
        else:
            table = read_unchecked(spec.store, path, columns,
                                   f"{spec.head.cache}/{spec.head.fingerprint}", self.fs)
            if path in spec.reading.selections:  # rows taken straight from the file: no copy of it
                at = self.places(i, path, start, stop)
            else:
                table = table.slice(start, stop - start)
        if first:
            self.masks[i] = np.asarray(validation_mask(table.column(spec.key),
                                                       spec.recipe.evaluation.val_fraction))
            if spec.views and not self.validation:
                self.ids[i] = row_ids(table.column(spec.key))
            if self.hands_to is not None:
                self.hands_to.kept[i] = rows_of(table, spec, np.flatnonzero(self.masks[i]))
        rows = np.flatnonzero(self.masks[i] if self.validation else ~self.masks[i])
        if seed is not None:
            rows = rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)
                                       ).numpy()]
        taken = rows if at is None else at[rows]
        if views:  # one view per row, drawn from (the piece's seed, the row's id)
            y = label_ids(table.column(spec.head.label), spec.head.class_names)
            v = draw(self.ids[i][rows], seed, spec.views)
            x = all_views(table.take(pa.array(taken)), spec)[np.arange(len(rows)), v]
            return torch.from_numpy(x), torch.from_numpy(y[taken])
        return rows_of(table, spec, taken)

    def places(self, i: int, path: str, start: int, stop: int) -> np.ndarray:
        """The file rows of piece i's rows, in a shard its version reads in part (kept)."""
        if i not in self.at:
            self.at[i] = Selection(*self.spec.reading.selections[path]).index()[start:stop]
        return self.at[i]

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
