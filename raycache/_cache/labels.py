"""A cache's label columns as fill and training both read them: whether a column holds class
names (`named`) and how many a manifest keeps, and a column's values as class ids."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._errors import RaycacheError

__all__ = ["MAX_NAMED", "label_ids", "named"]

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


def label_ids(column: pa.ChunkedArray | pa.Array, names: tuple[str, ...] = ()) -> np.ndarray:
    """A label column as int64 class ids: a named label's values by their place in `names`
    (the head's class names), an integer label as it is."""
    if not names:
        return column.to_numpy().astype(np.int64)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    ids = pc.index_in(column, value_set=pa.array(names, column.type))
    if ids.null_count:
        unknown = pc.filter(column, pc.is_null(ids)).unique().to_pylist()[:5]
        raise RaycacheError(f"label values {unknown} are not among the run's classes "
                            f"{list(names)[:10]}; the cache changed under the run: train again")
    return ids.to_numpy().astype(np.int64)
