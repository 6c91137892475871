"""Cached augmentation views in a fill: which encoders get them, and making them (each view
seeded by the row's content)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from raycache._errors import EncoderError
from raycache._fill.augment import apply

if TYPE_CHECKING:
    from raycache._encoders.config import EncoderConfig
    from raycache._fill.config import ViewsConfig

__all__ = ["describe", "make", "prepared_views", "view_encoders"]


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


