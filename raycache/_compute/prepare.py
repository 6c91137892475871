"""The prepare stage: each encoder's CPU preprocessing (tokenising) of a batch, as a column."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import pyarrow as pa

from raycache._cache.columns import input_column
from raycache._core import started
from raycache._encoders.config import EncoderConfig
from raycache._errors import BadInput
from raycache._source.files import META

__all__ = ["Inputs", "Prepare", "PrepareActor", "prepared"]

Prepare = Callable[[pa.Array], pa.Array]
"""An encoder's CPU preprocessing: raw input values in, model-ready inputs out."""


def prepared(e: EncoderConfig) -> str:
    """The column that carries an encoder's model-ready inputs between stages."""
    return f"__in_{e.name}"


class Inputs(Protocol):
    """How a prepare stage adds the model-ready columns to the passthrough ones (`out`), from
    the batch (`table`) and each encoder's preprocessing (`prepare`, by encoder name): fill's
    takes reused embeddings and makes views; without one, PrepareActor prepares every row."""

    def __call__(self, table: pa.Table, out: pa.Table, prepare: Mapping[str, Prepare]
                 ) -> pa.Table: ...


class PrepareActor:
    """Ray Data actor (or a plain callable, in-process): carries the `passthrough` columns (and
    the row bookkeeping) through, and adds each encoder's prepared inputs as its own column (a
    trainable encoder's as the shard column it is stored in); raw inputs are dropped unless
    passed through."""

    def __init__(self, encoders: list[EncoderConfig], passthrough: list[str],
                 inputs: Inputs | None = None):
        from raycache._encoders import ENCODERS

        started.mark("prepare:start")
        self.encoders, self.passthrough = encoders, [*dict.fromkeys([*passthrough, *META])]
        self.prepare = {e.name: ENCODERS[e.kind].prepare(e) for e in encoders}
        self.inputs = inputs
        started.mark("prepare:end")

    def __call__(self, table: pa.Table) -> pa.Table:
        try:
            return self._prepare(table)
        except BadInput as exc:  # name the row: its key and where it was read from
            raise BadInput(f"{exc} [{_row_of(table, exc, self.passthrough[0])}]", exc.value,
                           exc.column) from exc.__cause__

    def _prepare(self, table: pa.Table) -> pa.Table:
        out = table.select(self.passthrough)
        if self.inputs is not None:
            return self.inputs(table, out, self.prepare)
        for e in self.encoders:
            column = input_column(e.name) if e.trainable else prepared(e)
            out = out.append_column(column, self.prepare[e.name](table.column(e.input)
                                                                 .combine_chunks()))
        return out


def _row_of(table: pa.Table, exc: BadInput, key: str) -> str:
    """Where the bad value of `exc` is in the batch: the row's key, and its file and row."""
    try:
        at = table.column(exc.column).to_pylist().index(exc.value)
    except (KeyError, ValueError):
        return "its row was not found in the batch"
    where = f"the row with {key}={table.column(key)[at].as_py()!r}"
    if "__source" in table.column_names:
        where += (f", row {table.column('__row')[at].as_py()} of "
                  f"{table.column('__source')[at].as_py()}")
    return where
