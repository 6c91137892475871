"""A cache's label columns as fill and training both read them: whether a column holds class
names (`named`), and how many names a manifest keeps."""

from __future__ import annotations

import pyarrow as pa

__all__ = ["MAX_NAMED", "named"]

MAX_NAMED = 100_000
"""Named labels (strings) with more distinct values than this keep no vocabulary."""


def named(tp: pa.DataType | str) -> bool:
    """Whether a label column of this type (or its name, as a manifest records it) holds class
    names: strings, or categories of them."""
    if isinstance(tp, str):
        return tp in ("string", "large_string") or tp.startswith(
            ("dictionary<values=string,", "dictionary<values=large_string,"))
    if pa.types.is_dictionary(tp):
        tp = tp.value_type
    return pa.types.is_string(tp) or pa.types.is_large_string(tp)
