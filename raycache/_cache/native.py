"""Vectors as Arrow and numpy know them: a cache's vector columns as FixedSizeList<float>[dim]
of the number type asked for, 2-D numpy arrays (views of the decoded shard where one chunk holds
them), pandas frames in the form asked for, and tensor columns for Ray Data.

Shards keep their packed layout (cache.vectors); everything here starts from the unpacked
table a read gives (fixed-size lists, a view of the same bytes)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raycache._errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DTYPES", "VECTOR_FORMS", "as_dtype", "copy_rows", "frame", "is_vector", "matrix",
           "pick_encoder", "stacked", "tensors"]

DTYPES = {"float32": pa.float32(), "float16": pa.float16(), "float64": pa.float64()}
"""Number types a reader may ask vectors in."""
VECTOR_FORMS = {
    "rows": "one numpy array per row (views of one 2-D block; the default)",
    "wide": "one float column per dimension, <column>_0 ... <column>_<dim-1>",
    "arrow": "one column of pandas' ArrowDtype(fixed_size_list): no copy, no Python objects",
}
"""The forms `Cache.to_pandas(vectors=...)` gives a vector column in."""


def is_vector(field: pa.Field) -> bool:
    """A column of vectors: a fixed-size list of floating point numbers."""
    return pa.types.is_fixed_size_list(field.type) and pa.types.is_floating(
        field.type.value_type)


def _dtype(dtype: str | None) -> pa.DataType | None:
    if dtype is None:
        return None
    if dtype not in DTYPES:
        raise ConfigError([f"dtype={dtype!r} is not a number type vectors are read in; "
                           f"expected one of {sorted(DTYPES)} (or None: as stored)"])
    return DTYPES[dtype]


def as_dtype(table: pa.Table, dtype: str | None) -> pa.Table:
    """`table` with every vector column's numbers as `dtype` (None, or already that type: as
    it is, no copy)."""
    value = _dtype(dtype)
    if value is None:
        return table
    for i, field in enumerate(table.schema):
        if is_vector(field) and field.type.value_type != value:
            kind = pa.list_(pa.field("element", value, nullable=False), field.type.list_size)
            table = table.set_column(i, pa.field(field.name, kind, nullable=field.nullable),
                                     table.column(i).cast(kind))
    return table


def pick_encoder(names: Iterable[str], encoder: str | None, label: str) -> str:
    """The encoder asked for, checked against the cache's (`label`), or its only one."""
    names = list(names)
    if encoder is None and len(names) == 1:
        return names[0]
    if encoder in names:
        return encoder
    what = "name one of them" if encoder is None else f"{encoder!r} is not one of them; name one"
    raise ConfigError([f"cache {label} has encoders {names}: {what}, e.g. {names[0]!r}"])


def _flat(chunk: pa.FixedSizeListArray) -> pa.Array:
    """A chunk's numbers as a flat array at offset 0 over a slice of its buffer (no copy;
    pyarrow's tensor conversions read the buffer from its start)."""
    dim, values = chunk.type.list_size, chunk.values
    width = values.type.bit_width // 8
    start = (values.offset + chunk.offset * dim) * width
    return pa.Array.from_buffers(values.type, len(chunk) * dim,
                                 [None, values.buffers()[1].slice(start, len(chunk) * dim * width)])


def _values(chunk: pa.FixedSizeListArray) -> np.ndarray:
    """A chunk's numbers as a (rows, dim) numpy view of its buffer (no copy)."""
    dim = chunk.type.list_size
    flat = chunk.values.slice(chunk.offset * dim, len(chunk) * dim)
    return flat.to_numpy(zero_copy_only=True).reshape(len(chunk), dim)


def matrix(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A vector column as one (rows, dim) array: a view of its buffer when it is one chunk
    (read-only), else one copy of the chunks."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    chunks = [c for c in chunks if len(c)] or chunks[:1]
    if not chunks:
        return np.empty((0, column.type.list_size), column.type.value_type.to_pandas_dtype())
    if len(chunks) == 1:
        return _values(chunks[0])
    return np.concatenate([_values(c) for c in chunks])


def copy_rows(out: np.ndarray, start: int, column: pa.ChunkedArray) -> int:
    """Copy a vector column's rows into `out` from row `start`; the row after them."""
    for chunk in column.chunks:
        take = min(len(chunk), len(out) - start)
        out[start:start + take] = _values(chunk)[:take]
        start += take
    return start


def stacked(tables: Generator[pa.Table, None, None], name: str, rows: int, dim: int,
            dtype: str | None) -> np.ndarray:
    """Column `name` of the first `rows` rows of `tables` (shards, in order) as one (rows, dim)
    array: a view of the first table's when it holds them all in one chunk, else the shards
    copied into one array as they come (never all of them held at once)."""
    out, n = None, 0
    with contextlib.closing(tables):
        for table in tables:
            column = as_dtype(table, dtype).column(name)
            if out is None and len(column) >= rows and column.num_chunks == 1:
                return matrix(column.slice(0, rows))
            if out is None:
                out = np.empty((rows, dim), column.type.value_type.to_pandas_dtype())
            n = copy_rows(out, n, column)
            if n >= rows:
                break
    if out is None:  # no shards
        return np.empty((0, dim), (_dtype(dtype) or pa.float32()).to_pandas_dtype())
    return out if n == rows else out[:n]  # shards that hold fewer rows than the manifest says


def frame(table: pa.Table, vectors: str) -> pd.DataFrame:
    """`table` as a DataFrame, its vector columns in the form VECTOR_FORMS names."""
    import pandas as pd

    if vectors not in VECTOR_FORMS:
        raise ConfigError([f"vectors={vectors!r} is not a form of vector column; expected one "
                           f"of {sorted(VECTOR_FORMS)}: " + "; ".join(
                               f"{k}: {v}" for k, v in VECTOR_FORMS.items())])
    names = [f.name for f in table.schema if is_vector(f)]
    if vectors == "arrow":
        return table.to_pandas(types_mapper=lambda t: pd.ArrowDtype(t)
                               if pa.types.is_fixed_size_list(t) else None)
    df = table.drop_columns(names).to_pandas()
    for name in names:
        block = matrix(table.column(name))
        if vectors == "rows":
            column = np.empty(len(block), dtype=object)
            column[:] = list(block)
            df[name] = column
        else:
            wide = pd.DataFrame(block, columns=[f"{name}_{j}" for j in range(block.shape[1])],
                                index=df.index)
            df = pd.concat([df, wide], axis=1)
    return df if vectors == "wide" else df[table.column_names]


def tensors(table: pa.Table) -> pa.Table:
    """Every vector column of `table` as Arrow's canonical fixed_shape_tensor of shape [dim]
    (the same bytes): Ray Data hands such a column to a numpy batch as one 2-D array."""
    for i, field in enumerate(table.schema):
        if is_vector(field):
            kind = pa.fixed_shape_tensor(field.type.value_type, [field.type.list_size])
            chunks = [pa.ExtensionArray.from_storage(kind, pa.FixedSizeListArray.from_arrays(
                _flat(c), field.type.list_size)) for c in table.column(i).chunks]
            table = table.set_column(i, pa.field(field.name, kind),
                                     pa.chunked_array(chunks, kind))
    return table
