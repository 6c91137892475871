"""Cached augmentation views: their column names, making them in a fill (seeded per row by
content), and drawing one per row per training epoch (seeded by the epoch and the row's key)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache.augment import apply
from raycache.errors import EncoderError

if TYPE_CHECKING:
    from raycache.config import EncoderConfig, ViewsConfig

__all__ = ["SUFFIX", "describe", "draw", "is_views_column", "make", "prepared_views",
           "row_ids", "view_encoders", "views_column"]

SUFFIX = "@views"


def views_column(encoder: str) -> str:
    """The shard column holding an encoder's K view embeddings per row: a fixed-size list of
    K * dim numbers, view after view (reshape a row to (K, dim))."""
    return f"{encoder}{SUFFIX}"


def is_views_column(name: str) -> bool:
    return name.endswith(SUFFIX)


def prepared_views(encoder: str) -> str:
    """Between the fill's stages: an encoder's K prepared views per row."""
    return f"__views_{encoder}"


def view_encoders(views: ViewsConfig | None, encoders: list[EncoderConfig]
                  ) -> list[EncoderConfig]:
    """The encoders that get views (none without a views config)."""
    if views is None:
        return []
    return [e for e in encoders if views.encoders is None or e.name in views.encoders]


def describe(views: ViewsConfig | None, encoders: list[EncoderConfig]) -> dict[str, Any] | None:
    """What the fingerprint and the manifest hold of the views (None without views)."""
    if views is None:
        return None
    return {"count": views.count, "seed": views.seed, "augment": views.augment,
            "encoders": [e.name for e in view_encoders(views, encoders)]}


def make(values: pa.Array, hashes: pa.Array, views: ViewsConfig, where: str) -> pa.Array:
    """K augmented copies of each value, row after row (length rows * K, the input's type).
    View v of a row comes from a generator seeded by (views.seed, the row's input hash, v), so
    it is the same whatever batch, shard or worker the row lands in."""
    out = []
    for value, digest in zip(values.to_pylist(), hashes.to_pylist(), strict=True):
        words = np.frombuffer(digest[:16], np.uint32).tolist()
        for v in range(views.count):
            rng = np.random.default_rng([views.seed, *words, v])
            try:
                out.append(apply(value, rng, views.augment))
            except Exception as exc:  # a user augmentation may raise anything
                raise EncoderError(
                    f"{where}: augmenting a value of type {type(value).__name__} with "
                    f"{views.augment} failed ({type(exc).__name__}: {exc}); use augmentations "
                    "made for this input (text: word_dropout, word_swap, crop; lists of "
                    "numbers: gaussian_noise)") from exc
    return pa.array(out, type=values.type)


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
