"""Where a worker keeps its share of the cache during training: in memory, or streamed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from raycache.cache.columns import input_column, views_column
from raycache.cache.reads import map_ordered, read_checked
from raycache.cache.vectors import unpack
from raycache.errors import RaycacheError
from raycache.train.data.split import validation_mask
from raycache.train.data.views import draw, row_ids
from raycache.train.runspec import RunSpec

if TYPE_CHECKING:
    from raycache.heads.joint import Inputs

__all__ = ["InMemory", "Streamed", "all_views", "beside_readers", "cached_columns", "expected",
           "features", "label_ids", "load_share", "pieces", "read_piece", "rows_of",
           "to_arrays",
           "view_columns"]

KEPT_VALIDATION_BYTES = 1 << 30
"""A streamed share keeps its validation rows in memory, taken from the training pass's first
reads, when their features take at most this; above it, every validation pass reads the
shards again."""
READERS = 2
"""Pieces a streamed share reads at once: Parquet decoding and file reads release the GIL, so
two readers overlap each other and the training step."""



def beside_readers() -> None:
    """Leave the READERS their cores: torch's OpenMP threads spin while they wait, so a step's
    threads and the readers together must not outnumber the cores (on 2 cores, a streamed
    epoch with 2 step threads ran at 0.65 of one with 1)."""
    cores = min(torch.get_num_threads(), os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores - READERS))


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


def features(batch: pa.Table, encoders: tuple[str, ...], keep: np.ndarray | None = None
             ) -> np.ndarray:
    """The embedding columns, concatenated in order, as float32 rows (with `keep`, a boolean
    mask, only those rows): a read-only view of the Arrow buffer where one float32 column in
    one chunk allows it (callers copy what they keep), else one array filled chunk by chunk (one
    copy, however many shards the table holds, in Arrow's memory pool: a load of gigabytes
    reuses the pages of the one before instead of faulting in fresh ones)."""
    columns = [batch.column(name) for name in encoders]
    if keep is None and len(columns) == 1 and columns[0].num_chunks == 1 \
            and columns[0].type.value_type == pa.float32():
        col = columns[0].chunk(0)
        return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
    dims = [c.type.list_size for c in columns]
    rows = batch.num_rows if keep is None else int(np.count_nonzero(keep))
    x = np.frombuffer(pa.allocate_buffer(rows * sum(dims) * 4), np.float32)
    x = x.reshape(rows, sum(dims))
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


def view_columns(spec: RunSpec) -> list[str]:
    """The views columns a run trains on (none when it uses no views)."""
    return [views_column(e) for e in spec.head.encoders if e in spec.view_encoders]


def all_views(batch: pa.Table, spec: RunSpec) -> np.ndarray:
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


def load_share(spec: RunSpec, rank: int, world: int) -> pa.Table | None:
    """This worker's contiguous 1/world of the cache's rows, read straight from the store (each
    shard whole and checked against the manifest when the spec carries checks), in parallel."""
    columns = [spec.key, spec.head.label, *cached_columns(spec), *view_columns(spec)]
    checks = expected(spec)
    tables = list(map_ordered(
        lambda p: read_piece(spec, p[0], columns, checks.get(p[0])).slice(p[1], p[2] - p[1]),
        pieces(spec, rank, world)))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def cached_columns(spec: RunSpec) -> list[str]:
    """The shard columns a worker reads besides key and label: the frozen encoders' embeddings,
    and the trainable encoders' inputs."""
    return [*spec.head.frozen, *(input_column(e) for e in spec.head.trainable)]


def rows_of(table: pa.Table, spec: RunSpec, rows: np.ndarray | None = None
            ) -> tuple[torch.Tensor | Inputs, torch.Tensor]:
    """A table's `rows` (all: None; row numbers, or a boolean mask) as (model inputs, labels):
    the frozen features as one float32 tensor, or with trainable encoders as Inputs
    (raycache.heads.joint)."""
    keep = rows if rows is not None and rows.dtype == np.bool_ else None
    x, y = to_arrays(table, spec.head.frozen, spec.head.label, spec.head.class_names, keep)
    if rows is not None and keep is None:
        x, y = np.take(x, rows, axis=0), y[rows]
    if not spec.head.trainable:  # np.take copied; a whole table's x may be a read-only view
        return (torch.from_numpy(x) if x.flags.writeable else torch.tensor(x)), \
            torch.from_numpy(y)
    from raycache.heads.joint import inputs

    if rows is not None:
        table = table.filter(pa.array(keep)) if keep is not None else table.take(pa.array(rows))
    return inputs(table, spec.head, x), torch.from_numpy(y)


def expected(spec: RunSpec) -> dict[str, tuple[int, str]]:
    """Each shard path's (bytes, sha256) from the manifest; empty where the run reads unchecked."""
    if not spec.checks:
        return {}
    return {path: check for (path, _), check in zip(spec.shards, spec.checks, strict=True)}


def read_piece(spec: RunSpec, path: str, columns: list[str],
               check: tuple[int, str] | None) -> pa.Table:
    """A shard read whole and checked against (bytes, sha256) (CorruptShard on a mismatch); with
    no check, only `columns`."""
    if check is not None:
        return read_checked(spec.store, path, *check,
                            f"{spec.head.cache}/{spec.head.fingerprint}", columns)
    with spec.store.fs.open(path, "rb") as f:
        return unpack(pq.read_table(f, columns=columns))


class InMemory:
    """A worker's share held as two tensors (host or device memory), reshuffled every epoch;
    with trainable encoders, x is an Inputs (the cached features and their input rows). With
    `ids` (each row's id, from its key) and a spec with views, it also holds every row's K views
    and trains each pass on one view per row, drawn from (the pass's seed, row id)."""

    def __init__(self, table: pa.Table | None, spec: RunSpec, where: torch.device,
                 ids: np.ndarray | None = None, rows: np.ndarray | None = None):
        self.views: torch.Tensor | None = None
        self.ids = ids
        if table is None or table.num_rows == 0 or (rows is not None and not rows.any()):
            self.x = torch.empty(0, spec.head.in_dim, device=where)  # no rows: never indexed
            self.y = torch.empty(0, dtype=torch.int64, device=where)
        else:
            x, y = rows_of(table, spec, rows)
            self.x, self.y = x.to(where), y.to(where)
            if ids is not None and spec.views:  # views and trainable encoders never meet
                self.views = torch.from_numpy(all_views(table, spec)).to(where)

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
    def for_worker(spec: RunSpec, rank: int, where: torch.device) -> tuple[InMemory, InMemory]:
        """(training, validation) of this worker's share: training on views when the spec has
        them, validation on the clean embeddings. Each side's rows are gathered straight from
        the shards' columns (no filtered copy of the table first)."""
        table = load_share(spec, rank, spec.world)
        if table is None:
            return InMemory(None, spec, where), InMemory(None, spec, where)
        held = validation_mask(table.column(spec.key), spec.recipe.evaluation.val_fraction)
        held = held.to_numpy(zero_copy_only=False)
        if spec.views:  # each training row's K views too, drawn by the row's id
            train = table.filter(pa.array(~held))
            return (InMemory(train, spec, where, row_ids(train.column(spec.key))),
                    InMemory(table.drop_columns(view_columns(spec)), spec, where, rows=held))
        return InMemory(table, spec, where, rows=~held), InMemory(table, spec, where, rows=held)


class Streamed:
    """A worker's share read from the store piece by piece on every pass, never all in memory.

    Background threads (READERS) read `prefetch_batches` pieces ahead, across passes too:
    when a pass ends, the next one's first pieces are already being read (for training, the
    caller names the next pass's seed with `then`). The key split of each piece is computed
    on the first read and kept (a byte per row); later reads skip the key column. The first read
    of each piece in a run is of the whole shard, checked against the manifest (spec.checks).
    """

    def __init__(self, spec: RunSpec, rank: int, validation: bool, device: torch.device):
        self.spec, self.validation, self.device = spec, validation, device
        self.pieces = pieces(spec, rank, spec.world)
        self.masks: dict[int, np.ndarray] = {}
        self.ids: dict[int, np.ndarray] = {}
        """Row ids of each piece's training rows, for drawing views (runs with views only)."""
        self.checks = expected(spec)
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
    def for_worker(spec: RunSpec, rank: int, device: torch.device
                   ) -> tuple[Streamed, Streamed]:
        """(training, validation) of this worker's share. Where the validation rows are small
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
        if first:  # the first read in this run: whole, checked against the manifest
            table = read_piece(spec, path, [spec.key, *columns], self.checks.get(path))
        else:
            table = unpack(pq.read_table(path, columns=columns, filesystem=self.fs,
                                         use_threads=False))
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
        if views:  # one view per row, drawn from (the piece's seed, the row's id)
            y = label_ids(table.column(spec.head.label), spec.head.class_names)
            v = draw(self.ids[i][rows], seed, spec.views)
            x = all_views(table.take(pa.array(rows)), spec)[np.arange(len(rows)), v]
            return torch.from_numpy(x), torch.from_numpy(y[rows])
        return rows_of(table, spec, rows)

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
