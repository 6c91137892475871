"""The names of a shard's columns beyond the key, labels and embeddings: trainable encoders'
inputs, augmentation views and input hashes."""

from __future__ import annotations

__all__ = ["HASH_PREFIX", "SUFFIX", "hash_column", "input_column", "is_views_column",
           "views_column"]

def input_column(encoder: str) -> str:
    """The shard column that holds a trainable encoder's input, prepared (hf-text: token ids;
    torch: the source values as they are), which training feeds to the live encoder."""
    return f"{encoder}__input"


SUFFIX = "@views"


def views_column(encoder: str) -> str:
    """The shard column holding an encoder's K view embeddings per row: a fixed-size list of
    K * dim numbers, view after view (reshape a row to (K, dim))."""
    return f"{encoder}{SUFFIX}"


def is_views_column(name: str) -> bool:
    return name.endswith(SUFFIX)


HASH_PREFIX = "_sha256_"


def hash_column(input_column: str) -> str:
    """The shard column holding the sha256 of each row's value of an encoder's input column."""
    return f"{HASH_PREFIX}{input_column}"
