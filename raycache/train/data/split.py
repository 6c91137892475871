"""Train/validation split by a stable hash of each row's key: the same rows every run."""

from __future__ import annotations

import zlib

import pyarrow as pa
import pyarrow.compute as pc

BUCKETS = 10_000


def validation_mask(keys: pa.Array | pa.ChunkedArray, fraction: float) -> pa.Array:
    """True for the rows held out for validation (about `fraction` of them)."""
    cut = int(fraction * BUCKETS)
    return pa.array([zlib.crc32(str(k).encode()) % BUCKETS < cut for k in keys.to_pylist()])


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
