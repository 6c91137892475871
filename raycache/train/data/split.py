"""Train/validation split by a stable hash of each row's key: the same rows every run."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

BUCKETS = 10_000
SURE = 20.0
"""-log of the chance that a split leaves one side empty, above which it is not counted key
by key (below e^-20, 2e-9): (1 - f)^rows for the smaller side's fraction f."""


def validation_mask(keys: pa.Array | pa.ChunkedArray, fraction: float) -> pa.Array:
    """True for the rows held out for validation (about `fraction` of them)."""
    cut = int(fraction * BUCKETS)
    return pa.array([zlib.crc32(str(k).encode()) % BUCKETS < cut for k in keys.to_pylist()])


def sides(rows: int, fraction: float, keys: Callable[[], pa.Array | pa.ChunkedArray]
          ) -> tuple[int, int] | None:
    """(training rows, validation rows) of a split of `rows` rows, counted from `keys` where
    either side may come out empty; None where both surely hold rows (no keys read)."""
    cut = int(fraction * BUCKETS)
    if cut == 0:
        return rows, 0
    if cut >= BUCKETS:
        return 0, rows
    if -rows * math.log1p(-min(fraction, 1 - fraction)) >= SURE:
        return None
    held = pc.sum(validation_mask(keys(), fraction)).as_py() or 0
    return rows - held, held


def split(table: pa.Table, key: str, fraction: float, validation: bool) -> pa.Table:
    """The validation rows of table (or the training rows), without the key column."""
    mask = validation_mask(table.column(key), fraction)
    return table.filter(mask if validation else pc.invert(mask)).drop_columns([key])


class SplitByKey:
    """The same split as a Ray Data map_batches function."""

    def __init__(self, key: str, fraction: float, validation: bool):
        self.key, self.fraction, self.validation = key, fraction, validation

    def __call__(self, table: pa.Table) -> pa.Table:
        return split(table, self.key, self.fraction, self.validation)
