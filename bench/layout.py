"""Shard layout for vectors: today's packed fixed-size binary (format 4) against a plain
FixedSizeList<float32>[dim] column, on training's hot path and fill's write.

Both layouts are written with fill's own Parquet writer (raycache._fill.shards._parquet: vector
columns plain, no dictionary, no statistics) and read with Arrow as raycache reads shards (one
thread per shard). Three measures, each the best of --repeat runs, each printed with its ratio
to the packed baseline of the same run (below 1.0: FixedSizeList is faster):

- in-memory load: every shard's bytes parsed and its vectors made one (rows, dim) float32 array
  (what the `cpu`/`gpu` placements do once);
- streamed epoch: every shard read batch by batch (--batch rows) with each batch's vectors as a
  (batch, dim) array (what the `stream` placement does every epoch);
- fill write: each shard's table (key, label, vectors) written to Parquet bytes, packing
  included for the packed layout.

    python bench/layout.py --rows 200000 --dim 384 --shard-rows 8192
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raycache._cache.native import matrix
from raycache._cache.vectors import pack, unpack

shards_mod = importlib.import_module("raycache._fill.shards")  # raycache.fill is a function


def tables(rows: int, dim: int, shard_rows: int, seed: int = 0) -> list[pa.Table]:
    """Shards of random unit-ish float32 vectors with a string key and an int label."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, shard_rows):
        n = min(shard_rows, rows - start)
        x = rng.standard_normal((n, dim), dtype=np.float32)
        kind = pa.list_(pa.field("element", pa.float32(), nullable=False), dim)
        out.append(pa.table({
            "id": pa.array([f"row-{i}" for i in range(start, start + n)]),
            "label": pa.array(rng.integers(0, 10, n), pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), type=kind)}))
    return out


def write(shards: list[pa.Table], packed: bool) -> list[pa.Buffer]:
    """Fill's write of every shard, packing first for the packed layout."""
    return [shards_mod._parquet(pack(t, ["emb"]) if packed else t) for t in shards]


def load(blobs: list[pa.Buffer], packed: bool) -> np.ndarray:
    """Every shard parsed and its vectors copied into one (rows, dim) array."""
    parts = []
    for blob in blobs:
        table = pq.ParquetFile(pa.BufferReader(blob)).read(use_threads=False)
        parts.append(matrix((unpack(table) if packed else table).column("emb")))
    return np.concatenate(parts)


def epoch(blobs: list[pa.Buffer], packed: bool, batch: int) -> int:
    """Every shard read batch by batch, each batch's vectors as one array; rows seen."""
    seen = 0
    for blob in blobs:
        file = pq.ParquetFile(pa.BufferReader(blob))
        for b in file.iter_batches(batch_size=batch, columns=["emb", "label"],
                                   use_threads=False):
            table = pa.Table.from_batches([b])
            x = matrix((unpack(table) if packed else table).column("emb"))
            seen += len(x)
    return seen


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--shard-rows", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    shards = tables(args.rows, args.dim, args.shard_rows)
    blobs = {packed: write(shards, packed) for packed in (True, False)}
    same = np.array_equal(load(blobs[True], True), load(blobs[False], False))
    print(f"{args.rows:,} rows x {args.dim} float32 in {len(shards)} shards of "
          f"{args.shard_rows:,}; both layouts read the same numbers: {same}")
    print(f"bytes: packed {sum(b.size for b in blobs[True]):,}, "
          f"FixedSizeList {sum(b.size for b in blobs[False]):,}")
    measures = {
        "in-memory load": lambda packed: load(blobs[packed], packed),
        f"streamed epoch (batches of {args.batch})":
            lambda packed: epoch(blobs[packed], packed, args.batch),
        "fill write": lambda packed: write(shards, packed),
    }
    print(f"{'measure':38} {'packed':>10} {'FixedSizeList':>14} {'ratio':>7}")
    for name, fn in measures.items():
        times = {}
        for _ in range(2):  # interleaved, so that the machine's noise falls on both
            for packed in (True, False):
                t = best(functools.partial(fn, packed), args.repeat)
                times[packed] = min(times.get(packed, t), t)
        rows_s = {k: args.rows / v for k, v in times.items()}
        print(f"{name:38} {times[True] * 1e3:8.1f}ms {times[False] * 1e3:12.1f}ms "
              f"{times[False] / times[True]:6.2f}x   ({rows_s[True] / 1e6:.2f}M vs "
              f"{rows_s[False] / 1e6:.2f}M rows/s)")


if __name__ == "__main__":
    main()
