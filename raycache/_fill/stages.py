"""The fill's own stages for the runner: its prepare inputs (reuse, views), and the encoder
stage (an actor on GPUs; on CPUs, part of the runner's ModelChain)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._cache.columns import hash_column, input_column, views_column
from raycache._compute.actor import start_actor
from raycache._compute.prepare import Prepare, prepared
from raycache._core import started as marks
from raycache._encoders.base import forward_stored
from raycache._encoders.config import EncoderConfig
from raycache._errors import BadInput
from raycache._fill.config import FillConfig, ViewsConfig
from raycache._fill.finite import BAD, SKIP, bad_rows, cause, mark, non_finite_error, stored
from raycache._fill.loads import load_encoder, memo_encoder
from raycache._fill.nulls import null_input
from raycache._fill.reuse import Reuse, input_hashes, need_column
from raycache._fill.shards import STARTED
from raycache._fill.views import make, prepared_views, view_encoders

if TYPE_CHECKING:
    from raycache._compute.pool import Pool
    from raycache._encoders import Encoder

__all__ = ["EncodeActor", "FillPrepare"]


class FillPrepare:
    """The fill's inputs of the prepare stage (compute.prepare.Inputs): hashes each encoder's
    input, takes the embeddings the store already has for those inputs (`reuse`), and runs each
    encoder's CPU preprocessing (tokenising, for text) on the rows still to encode, as its own
    column (a trainable encoder's on every row, as the shard column it is kept in). With
    `views`, it makes each row's K augmented inputs and prepares them too (one fixed-size list
    of K per row) for the frozen encoders; views are encoded, never reused."""

    def __init__(self, encoders: list[EncoderConfig], reuse: Reuse | None = None,
                 views: ViewsConfig | None = None, skip: bool = False):
        self.encoders, self.reuse, self.views, self.skip = encoders, reuse, views, skip

    def __call__(self, table: pa.Table, out: pa.Table, prepare: Mapping[str, Prepare]
                 ) -> pa.Table:
        """The prepared batch; with `skip` (on_bad_rows: skip), an input an encoder cannot
        take (BadInput) marks its rows skipped (fill.finite.BAD) and the rest are prepared,
        the skipped rows holding a good row's prepared inputs (never encoded) or, where no
        row is good, none."""
        if not self.skip:
            return self._prepare(table, out, prepare)
        bad = np.zeros(table.num_rows, bool)
        reasons = np.full(table.num_rows, None, object)
        while True:
            try:
                if not bad.any():  # the common case: no copy of the batch
                    kept = self._prepare(table, out, prepare)
                    return kept.append_column(BAD, pa.nulls(table.num_rows, pa.string()))
                good = pa.array(~bad)
                kept = self._prepare(table.filter(good), out.filter(good), prepare)
                break
            except BadInput as exc:  # a rare path: its rows found by value, then again
                rows = _rows_holding(table, exc, bad)
                if not rows.size:
                    raise
                bad[rows], reasons[rows] = True, str(exc)
        if bad.all():  # no good row: the columns' types (prepared from none), null
            index = pa.nulls(table.num_rows, pa.int64())
        else:  # bad rows: the first good row's values (the same schema in every batch)
            index = pa.array(np.where(bad, 0, np.cumsum(~bad) - 1))
        for name in kept.column_names:
            if name not in out.column_names:
                out = out.append_column(name, kept.column(name).take(index))
        return out.append_column(BAD, pa.array(reasons, pa.string()))

    def _prepare(self, table: pa.Table, out: pa.Table, prepare: Mapping[str, Prepare]
                 ) -> pa.Table:
        hashes = {}
        for e in self.encoders:  # a null input is an error (or, with skip, a skipped row)
            if nulls := table.column(e.input).null_count:
                raise null_input(e.name, e.input, nulls, table.num_rows)
        for column in dict.fromkeys(e.input for e in self.encoders):
            hashes[column] = input_hashes(table.column(column))
            out = out.append_column(hash_column(column), hashes[column])
        for e in self.encoders:
            values = table.column(e.input).combine_chunks()
            if e.trainable:  # not encoded: its prepared input is what the shards keep
                out = out.append_column(input_column(e.name), prepare[e.name](values))
                continue
            found = self.reuse.take(e.name, hashes[e.input]) if self.reuse else None
            if found is None:
                out = out.append_column(prepared(e), prepare[e.name](values))
                continue
            reused, need = found
            out = out.append_column(e.name, _embedding_column(reused))
            out = out.append_column(need_column(e.name), pa.array(need))
            # prepared inputs of the rows to encode only; null (a null index) elsewhere
            at = np.where(need, np.cumsum(need) - 1, -1)
            index = pa.array(at, mask=~need)
            out = out.append_column(prepared(e), prepare[e.name](values.filter(need)).take(index))
        augmented: dict[str, pa.Array] = {}  # encoders on the same input share its views
        for e in [e for e in view_encoders(self.views, self.encoders) if not e.trainable]:
            if e.input not in augmented:
                augmented[e.input] = make(table.column(e.input).combine_chunks(),
                                          hashes[e.input], self.views, f"encoder {e.name!r}")
            flat = prepare[e.name](augmented[e.input])
            out = out.append_column(prepared_views(e.name),
                                    pa.FixedSizeListArray.from_arrays(flat, self.views.count))
        return out


class EncodeActor:
    """Ray Data actor (or a stage of a CPU pool's tasks): loads each frozen encoder once (checking
    its weights; in a Ray worker process, once for every fill's tasks there, _compute.memo), then
    turns each batch of prepared inputs into one embedding column per encoder (trainable encoders
    are neither loaded nor run)."""

    def __init__(self, cfg: FillConfig, pool: Pool, digests: dict[str, str], lazy: bool = False):
        start_actor(pool, "encoder")
        self.cfg, self.pool, self.digests, self.lazy = cfg, pool, digests, lazy
        self.frozen = [e for e in cfg.encoders if not e.trainable]
        self._encoders: dict[str, Encoder] | None = None
        if not lazy:  # in an actor pool, a model that fails to load fails the actor's start
            self._encoders = self.encoders

    @property
    def encoders(self) -> dict[str, Encoder]:
        """The encoders, checked against the fingerprint's weights: loaded at start, or with
        `lazy` (in-process) at the first batch with rows to encode, so a fill that reuses every
        row loads none."""
        if self._encoders is None:
            load = load_encoder if self.lazy else memo_encoder
            with marks.span("model load"):
                self._encoders = {e.name: load(e, self.digests[e.name], self.pool)
                                  for e in self.frozen}
        return self._encoders

    def __call__(self, table: pa.Table) -> pa.Table:
        marks.once("encode")
        started = time.time()
        views = [e for e in view_encoders(self.cfg.views, self.cfg.encoders) if not e.trainable]
        inputs = {prepared(e) for e in self.frozen} | {prepared_views(e.name) for e in views}
        out = table.drop_columns([c for c in table.column_names if c in inputs])
        skip = (table.column(BAD).is_null().to_numpy(zero_copy_only=False)  # unreadable inputs
                if BAD in table.column_names else None)  # (on_bad_rows: skip)
        if skip is not None and not skip.any():  # every row skipped: the writer lists them
            return out.append_column(STARTED, pa.array(np.full(table.num_rows, started)))
        for e in self.frozen:
            if e.name not in table.column_names and skip is None:  # nothing reused: all rows
                raw = forward_stored(self.encoders[e.name], table.column(prepared(e)), e.dtype)
                emb = stored(raw, e.dtype)
                out = self._checked(out, e, emb, raw)
                out = out.append_column(e.name, _embedding_column(emb))
                continue
            need = (pc.fill_null(table.column(need_column(e.name)), False).to_numpy()
                    if e.name in table.column_names else np.ones(table.num_rows, bool))
            emb = (_embeddings(table.column(e.name)).astype(e.dtype) if e.name in
                   table.column_names else np.zeros((table.num_rows, 0), e.dtype))
            raw = None
            todo = need & skip if skip is not None else need
            if todo.any():
                done = self.encoders[e.name].forward(table.column(prepared(e))
                                                     .filter(pa.array(todo)))
                if not emb.shape[1]:
                    emb = np.zeros((table.num_rows, done.shape[1]), e.dtype)
                emb[todo] = stored(done, e.dtype)
                raw = np.zeros(emb.shape, np.float32)
                raw[todo] = done
            out = self._checked(out, e, emb, raw, encoded=todo)
            column = _embedding_column(emb)
            out = (out.set_column(out.schema.get_field_index(e.name), e.name, column)
                   if e.name in out.column_names else out.append_column(e.name, column))
        for e in views:  # each row's K views, encoded as one batch of rows * K inputs
            column = table.column(prepared_views(e.name)).combine_chunks()
            if skip is not None:  # a skipped row's views: never encoded, zeros
                some = self.encoders[e.name].forward(column.filter(pa.array(skip)).flatten())
                raw = np.zeros((table.num_rows, some.size // int(skip.sum())), np.float32)
                raw[skip] = some.reshape(int(skip.sum()), -1)
            else:
                raw = self.encoders[e.name].forward(column.flatten())
            emb = stored(raw, e.dtype).reshape(table.num_rows, -1)
            out = self._checked(out, e, emb, raw.reshape(table.num_rows, -1), "views")
            out = out.append_column(views_column(e.name), _embedding_column(emb))
        return out.append_column(STARTED, pa.array(np.full(table.num_rows, started)))

    def _checked(self, out: pa.Table, e: EncoderConfig, emb: np.ndarray,
                 raw: np.ndarray | None, what: str = "outputs",
                 encoded: np.ndarray | None = None) -> pa.Table:
        """`out`, having checked that the stored embeddings `emb` are finite: rows that are not
        fail the fill (raycache._fill.finite) or, with on_bad_rows: skip, are marked skipped.
        Rows already marked (an unreadable input) are left out of the check; `encoded`: the rows
        encoded now (the rest reused), where not all."""
        bad = bad_rows(emb)
        if bad is not None and BAD in out.column_names:
            bad &= out.column(BAD).is_null().to_numpy(zero_copy_only=False)
        if bad is None or not bad.any():
            return out
        if encoded is not None and (bad & ~encoded).any():
            raw = None  # reused embeddings: an older cache holds them
        if self.cfg.on_bad_rows != SKIP:
            raise non_finite_error(e.name, e.dtype, bad, out, self.cfg.source.key, raw, what)
        return mark(out, bad, f"encoder {e.name!r}: non-finite {what} (NaN or inf) as "
                              f"{e.dtype}. {cause(e.dtype, raw, bad)}".strip())


def _rows_holding(table: pa.Table, exc: BadInput, bad: np.ndarray) -> np.ndarray:
    """The rows not yet `bad` whose input holds the value a BadInput names."""
    if exc.column not in table.column_names:
        return np.zeros(0, np.int64)
    values = table.column(exc.column).to_pylist()
    return np.array([i for i, v in enumerate(values) if not bad[i] and v == exc.value],
                    np.int64)


def _embedding_column(emb: np.ndarray) -> pa.FixedSizeListArray:
    """A [rows, dim] array as a fixed-size list column; its elements non-null, so training
    decodes no definition levels."""
    flat = pa.array(emb.reshape(-1), type=pa.from_numpy_dtype(emb.dtype))
    kind = pa.list_(pa.field("element", flat.type, nullable=False), emb.shape[1])
    return pa.FixedSizeListArray.from_arrays(flat, type=kind)


def _embeddings(column: pa.ChunkedArray) -> np.ndarray:
    """A fixed-size list column as [rows, dim]; a null row (a skipped one) as whatever its
    slots hold."""
    array = column.combine_chunks()
    dim = array.type.list_size
    values = array.values.slice(array.offset * dim, len(array) * dim)
    return values.to_numpy(zero_copy_only=False).reshape(len(array), dim)
