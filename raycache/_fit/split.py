"""Train/validation split by a stable hash of each row's key: the same rows every run."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BUCKETS = 10_000
SURE = 20.0
"""-log of the chance that a split leaves one side empty, above which it is not counted key
by key (below e^-20, 2e-9): (1 - f)^rows for the smaller side's fraction f."""


def validation_mask(keys: pa.Array | pa.ChunkedArray, fraction: float) -> pa.Array:
    """True for the rows held out for validation (about `fraction` of them): crc32 of each
    key's text (`str(key)`) in BUCKETS buckets, the first `fraction` of them held out."""
    cut = int(fraction * BUCKETS)
    t = keys.type
    if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
        text = keys.cast(pa.large_string())  # as str(key) writes them
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        if not text.null_count:
            return pa.array(crc32s(text) % BUCKETS < cut)
    return pa.array([zlib.crc32(str(k).encode()) % BUCKETS < cut for k in keys.to_pylist()])


def _crc_table() -> np.ndarray:
    """CRC-32 (zlib's polynomial, reflected) of each byte value."""
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(0xEDB88320), crc >> 1)
    return crc.astype(np.uint32)


_TABLE = _crc_table()
WIDE = 64
"""Texts of up to this many bytes are checksummed together, a byte position at a time; longer
ones one by one (zlib.crc32)."""


def crc32s(text: pa.LargeStringArray) -> np.ndarray:
    """zlib.crc32 of every value's UTF-8 bytes, as uint32: column by column over the byte
    positions (one numpy pass per position, no Python per row)."""
    _, offsets, data = text.buffers()
    offs = np.frombuffer(offsets, np.int64)[text.offset: text.offset + len(text) + 1]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(1, np.uint8)
    lengths = np.diff(offs)
    width = int(lengths.max()) if len(lengths) else 0
    if width > WIDE:
        blob = raw.tobytes()
        return np.array([zlib.crc32(blob[a:b]) for a, b in zip(offs[:-1], offs[1:],
                                                                strict=True)], np.uint32)
    crc = np.full(len(lengths), 0xFFFFFFFF, np.uint32)
    for j in range(width):
        live = lengths > j
        byte = raw[np.minimum(offs[:-1] + j, max(len(raw) - 1, 0))]
        step = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        crc = np.where(live, step, crc)
    return crc ^ np.uint32(0xFFFFFFFF)


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
