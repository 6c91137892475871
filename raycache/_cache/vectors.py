"""How a shard stores vectors (embeddings, views): each row's numbers as one fixed-size binary
value (the numbers' bytes, little-endian, one after another), the field's metadata naming the
number type; readers get fixed-size lists back, zero-copy.

Why not Parquet's own nested list: Parquet decodes a list of floats value by value, with a
repetition level for each (~1.6 GB/s a core here), while a fixed-size binary column is read at
memory speed: 8,192 rows of 384 float32 decode in 0.6 ms instead of 6.4 and write in 1.5 ms
instead of 10. Training reads these columns every epoch, so their decoding set the speed of a
streamed part (bench/README.md). Read a shard without raycache with
`np.frombuffer(column.buffers()[1], "<f4").reshape(rows, dim)` per chunk, or through
`unpack` below."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["VECTOR", "is_packed", "pack", "unpack", "unpacked_type"]

VECTOR = b"raycache.vector"
"""Field metadata key of a packed column; its value is the numbers' numpy type (b"float32",
b"float16")."""


def is_packed(field: pa.Field) -> bool:
    return bool(field.metadata) and VECTOR in field.metadata


def unpacked_type(field: pa.Field) -> pa.DataType:
    """The fixed-size list type a packed field holds."""
    value = pa.from_numpy_dtype(np.dtype(field.metadata[VECTOR].decode()))
    dim = field.type.byte_width // (value.bit_width // 8)
    return pa.list_(pa.field("element", value, nullable=False), dim)


def pack(table: pa.Table, names: list[str]) -> pa.Table:
    """Columns `names` (fixed-size lists of numbers, no nulls) as packed binary columns."""
    for name in names:
        i = table.schema.get_field_index(name)
        kind = table.schema.field(i).type
        value = kind.value_type
        width = kind.list_size * value.bit_width // 8
        chunks = []
        for chunk in table.column(i).chunks:
            flat = chunk.flatten()  # this chunk's numbers, its offset applied
            data = flat.buffers()[1].slice(flat.offset * value.bit_width // 8,
                                           len(flat) * value.bit_width // 8)
            chunks.append(pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(chunk),
                                                               [None, data]))
        field = pa.field(name, pa.binary(width), nullable=False,
                         metadata={VECTOR: np.dtype(value.to_pandas_dtype()).name.encode()})
        table = table.set_column(i, field, pa.chunked_array(chunks, pa.binary(width)))
    return table


def unpack(table: pa.Table) -> pa.Table:
    """Every packed column of `table` back as a fixed-size list (a view of the same bytes);
    other columns, and tables written before packing, as they are."""
    for i, field in enumerate(table.schema):
        if not is_packed(field):
            continue
        kind = unpacked_type(field)
        dim, value = kind.list_size, kind.value_type
        chunks = [pa.FixedSizeListArray.from_arrays(
                      pa.Array.from_buffers(value, len(c) * dim, [None, c.buffers()[1]],
                                            offset=c.offset * dim), type=kind)
                  for c in table.column(i).chunks]
        table = table.set_column(i, pa.field(field.name, kind),
                                 pa.chunked_array(chunks, kind))
    return table
