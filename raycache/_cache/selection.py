"""Row selections: which rows of a shard file a cache version keeps (the rest were deleted or
changed in a later version), stored compactly in the shard list beside the shard's entry."""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pyarrow as pa

__all__ = ["BadSelection", "decode", "encode", "select"]


class BadSelection(ValueError):
    """A row selection (`keep`) that does not decode, or does not fit its file's rows."""


def encode(keep: np.ndarray) -> str:
    """A boolean mask as text: its bits packed, deflated and base64'd (8,192 rows with 1% of
    them scattered gone take ~150 characters; an empty or whole selection, a few)."""
    packed = np.packbits(np.asarray(keep, bool))
    return base64.b64encode(zlib.compress(packed.tobytes(), 9)).decode()


def decode(text: str, rows: int) -> np.ndarray:
    """The boolean mask over a shard file's `rows` rows that `encode` wrote; BadSelection where
    the text does not decode (base64, then deflate), holds another number of bits, or sets a
    bit past the file's last row."""
    try:
        packed = np.frombuffer(zlib.decompress(base64.b64decode(text, validate=True)), np.uint8)
    except (ValueError, TypeError, zlib.error) as exc:  # binascii.Error is a ValueError
        raise BadSelection(f"a row selection that does not decode ({exc})") from None
    if len(packed) != -(-rows // 8):
        raise BadSelection(f"a row selection of {len(packed) * 8} bits for a shard of {rows} "
                           "rows")
    bits = np.unpackbits(packed)
    if bits[rows:].any():
        raise BadSelection(f"a row selection that keeps rows past the shard's {rows}")
    return bits[:rows].astype(bool)


def select(table: pa.Table, keep: str, rows: int) -> pa.Table:
    """The rows of a shard file's table that a selection keeps (all where `keep` is empty);
    BadSelection where the file holds another number of rows than `rows` (its entry's: a
    selection or a row count edited by hand would read rows the version left out)."""
    mask = decode(keep, rows) if keep else None
    if table.num_rows != rows:
        what = "a row selection over" if keep else "an entry that reads all its"
        raise BadSelection(f"{what} {rows} rows for a shard that holds {table.num_rows}")
    return table if mask is None else table.filter(pa.array(mask))
