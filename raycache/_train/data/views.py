"""Cached augmentation views in training: one view drawn per row per epoch, seeded by the
epoch and the row's key (so reruns and resumes repeat it)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["draw", "row_ids"]


def row_ids(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A stable 64-bit id per row from its key (independent of shard, worker and order)."""
    import hashlib

    return np.array([int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(),
                                    "little") for k in keys.to_pylist()], np.uint64)


def draw(ids: np.ndarray, seed: int, count: int) -> np.ndarray:
    """The view each row trains on in the pass seeded by `seed`: a splitmix64 hash of (seed,
    row id), modulo `count`; a pure function, so reruns and resumes draw the same views."""
    with np.errstate(over="ignore"):
        z = ids ^ np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(count)).astype(np.int64)
