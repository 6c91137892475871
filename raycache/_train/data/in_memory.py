"""A worker's part held in memory (placement: cpu, or gpu in device memory), reshuffled every
epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import torch

from raycache._cache.reads import map_ordered
from raycache._fit.part import expected, features, label_ids, pieces, read_piece
from raycache._fit.split import validation_mask
from raycache._train.data.rows import Batches, all_views, load_worker_part, rows_of, view_columns
from raycache._train.data.views import draw, row_ids
from raycache._train.runspec import WorkerSpec

if TYPE_CHECKING:
    from raycache._heads.joint import Inputs

__all__ = ["InMemory"]


class InMemory:
    """A worker's part held as two tensors (host or device memory), reshuffled every epoch;
    with trainable encoders, x is an Inputs (the cached features and their input rows). With
    `ids` (each row's id) and `views` (every row's K views), it trains each pass on one view
    per row, drawn from (the pass's seed, row id)."""

    overlap = ""
    """Its rows are all there (rows.Rows)."""

    def __init__(self, x: torch.Tensor | Inputs, y: torch.Tensor,
                 views: torch.Tensor | None = None, ids: np.ndarray | None = None):
        self.x, self.y, self.views, self.ids = x, y, views, ids

    @classmethod
    def empty(cls, spec: WorkerSpec, where: torch.device) -> InMemory:
        """No rows: never indexed."""
        return cls(torch.empty(0, spec.head.in_dim, device=where),
                   torch.empty(0, dtype=torch.int64, device=where))

    @classmethod
    def of_table(cls, table: pa.Table, spec: WorkerSpec, where: torch.device,
                 ids: np.ndarray | None = None, rows: np.ndarray | None = None) -> InMemory:
        """A table's `rows` (all: None; a boolean mask); with `ids` and a spec with views, their
        views too."""
        if table.num_rows == 0 or (rows is not None and not rows.any()):
            return cls.empty(spec, where)
        x, y = rows_of(table, spec, rows)
        views = None
        if ids is not None and spec.views:  # views and trainable encoders never meet
            views = torch.from_numpy(all_views(table, spec)).to(where)
        return cls(x.to(where), y.to(where), views, ids)

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
        order = order.to(self.y.device)
        x = self.x
        if self.views is not None:  # this pass's view of each row, gathered once
            v = torch.from_numpy(draw(self.ids, seed, self.views.shape[1])).to(self.y.device)
            x = self.views[torch.arange(n, device=self.y.device), v]
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            yield x[idx], self.y[idx]

    @staticmethod
    def for_worker(spec: WorkerSpec, rank: int, where: torch.device) -> tuple[InMemory, InMemory]:
        """(training, validation) of this worker's part: training on views when the spec has
        them, validation on the clean embeddings."""
        if not spec.views and not spec.head.trainable:
            return gathered(spec, rank, where)
        table = load_worker_part(spec, rank, spec.world)
        if table is None:
            return InMemory.empty(spec, where), InMemory.empty(spec, where)
        held = validation_mask(table.column(spec.key), spec.recipe.evaluation.val_fraction)
        held = held.to_numpy(zero_copy_only=False)
        if spec.views:  # each training row's K views too, drawn by the row's id
            train = table.filter(pa.array(~held))
            return (InMemory.of_table(train, spec, where, row_ids(train.column(spec.key))),
                    InMemory.of_table(table.drop_columns(view_columns(spec)), spec, where,
                                      rows=held))
        return (InMemory.of_table(table, spec, where, rows=~held),
                InMemory.of_table(table, spec, where, rows=held))


def gathered(spec: WorkerSpec, rank: int, where: torch.device) -> tuple[InMemory, InMemory]:
    """(training, validation) of a part of frozen features only, each shard's rows copied into
    the two sides' arrays as soon as it is read and checked, shards read in parallel: the part
    is held once (its arrays, and the few shards under way), never also as a table."""
    parts = pieces(spec.reading, rank, spec.world)
    total = sum(stop - start for _, start, stop in parts)
    checks = expected(spec.reading)
    columns = [spec.key, spec.head.label, *spec.head.frozen]
    fraction = spec.recipe.evaluation.val_fraction
    x: np.ndarray | None = None
    n = 0
    ys, val_x, val_y = [], [], []
    for table in map_ordered(lambda p: read_piece(spec.reading, p[0], columns, checks.get(p[0]))
                             .slice(p[1], p[2] - p[1]), parts):
        held = validation_mask(table.column(spec.key), fraction).to_numpy(zero_copy_only=False)
        if x is None:  # room for every row; the pages of the validation rows' fraction unused
            dim = sum(table.column(e).type.list_size for e in spec.head.frozen)
            x = np.frombuffer(pa.allocate_buffer(total * dim * 4), np.float32)
            x = x.reshape(total, dim)
        k = int(np.count_nonzero(~held))
        features(table, spec.head.frozen, ~held, out=x[n:n + k])
        n += k
        y = label_ids(table.column(spec.head.label), spec.head.class_names)
        ys.append(y[~held])
        val_x.append(features(table, spec.head.frozen, held))
        val_y.append(y[held])
    if x is None:
        return InMemory.empty(spec, where), InMemory.empty(spec, where)
    return (InMemory(torch.from_numpy(x[:n]).to(where), torch.from_numpy(np.concatenate(ys))
                     .to(where)),
            InMemory(torch.from_numpy(np.concatenate(val_x)).to(where),
                     torch.from_numpy(np.concatenate(val_y)).to(where)))
