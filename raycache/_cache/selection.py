"""Row selections: which rows of a shard file a cache version keeps (the rest were deleted or
changed in a later version), stored compactly in the shard list beside the shard's entry."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pyarrow as pa

__all__ = ["decode", "encode", "select"]


def encode(keep: np.ndarray) -> str:
    """A boolean mask as text: its bits packed, deflated and base64'd (8,192 rows with 1% of
    them scattered gone take ~150 characters; an empty or whole selection, a few)."""
    packed = np.packbits(np.asarray(keep, bool))
    return base64.b64encode(zlib.compress(packed.tobytes(), 9)).decode()


def decode(text: str, rows: int) -> np.ndarray:
    """The boolean mask over a shard file's `rows` rows that `encode` wrote."""
    packed = np.frombuffer(zlib.decompress(base64.b64decode(text)), np.uint8)
    if len(packed) != -(-rows // 8):
        raise ValueError(f"a row selection of {len(packed) * 8} bits for a shard of {rows} rows")
    return np.unpackbits(packed, count=rows).astype(bool)


def select(table: pa.Table, keep: str, rows: int) -> pa.Table:
    """The rows of a shard file's table that a selection keeps (all where `keep` is empty)."""
    if not keep:
        return table
    mask = decode(keep, rows)
    if table.num_rows != rows:
        raise ValueError(f"a row selection over {rows} rows for a shard that holds "
                         f"{table.num_rows}")
    return table.filter(pa.array(mask))
