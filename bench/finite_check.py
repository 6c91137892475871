"""Benchmark: what the non-finite check (raycache._fill.finite.bad_rows) costs a fill, against
writing the same block as shards (the write stage's Parquet encoding of packed vectors, in
memory), per storage dtype. The two take turns in every repeat, so a machine's changing load
hits them alike.

    python bench/finite_check.py [--rows 65536] [--dim 384] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pyarrow as pa

from raycache._cache.vectors import pack
from raycache._fill.finite import bad_rows, stored
from raycache._fill.shards import _parquet
from raycache._fill.stages import _embedding_column


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65_536)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    raw = np.random.default_rng(0).normal(size=(args.rows, args.dim)).astype(np.float32)
    for dtype in ("float32", "float16"):
        emb = stored(raw, dtype)
        table = pa.table({"id": pa.array(np.arange(args.rows)), "e": _embedding_column(emb)})
        times: dict[str, list[float]] = {"check": [], "write": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            assert bad_rows(emb) is None
            times["check"].append(time.perf_counter() - start)
            start = time.perf_counter()
            _parquet(pack(table, ["e"]))
            times["write"].append(time.perf_counter() - start)
        check, write = (statistics.median(times[k]) for k in ("check", "write"))
        print(f"{dtype}: {args.rows} x {args.dim}: check {check * 1e3:.1f} ms "
              f"({args.rows / check / 1e6:.1f}M rows/s), shard write {write * 1e3:.1f} ms; "
              f"check / write = {check / write:.2f}x")


if __name__ == "__main__":
    main()
