"""Float label columns holding NaN: counted over the shards a fill wrote and named in its
manifest's label problems (and so its summary), as null labels are; training refuses them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.records import ShardRecord
from raycache._cache.store import Store

__all__ = ["nan_problems"]


def nan_problems(store: Store, cache_dir: str, records: Sequence[ShardRecord], key: str,
                 types: dict[str, pa.DataType]) -> list[str]:
    """In words, each float label column (of `types`, by column) that holds NaN in the shards
    of `records` (only those columns read): in how many rows, and the first one's key."""
    floats = [c for c, t in types.items() if pa.types.is_floating(t)]
    if not floats or not records:
        return []
    found: dict[str, list] = {}
    for record in sorted(records, key=ShardRecord.order):
        with store.fs.open(f"{cache_dir}/{record.path}", "rb") as f:
            table = pq.read_table(f, columns=[key, *floats])
        for c in floats:
            nan = pc.fill_null(pc.is_nan(table.column(c)), False)
            if n := pc.sum(nan).as_py() or 0:
                seen = found.setdefault(c, [0, table.column(key).filter(nan)[0].as_py()])
                seen[0] += n
    return [f"label {c!r} is NaN in {n} row(s), the first of key {first!r}: training on it is "
            "refused until they are given values or dropped in the source"
            for c, (n, first) in sorted(found.items())]
