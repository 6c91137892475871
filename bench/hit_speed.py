"""Benchmark: a warm fill (a hit) costs the same on a cache of N shards as on one of 10N.

Fills two caches in this process (no Ray) with a tiny fixed linear encoder, one source of N
shards' rows and one of 10N (the same small rows_per_shard), then times, median of --repeats:

  hit          raycache.fill of the same config again: plan (list the source, read its schema,
               fingerprint) and read the manifest; no shard is listed or read
  open_cache   raycache.open_cache by name (newest committed fill)
  train open   raycache.train's check of a TrainConfig against the cache: open it, and read the
               label column of every shard for the class counts (this one reads the shards)

and prints each one's 10N : N ratio (goal for the hit: <= 1.5x).

    python bench/hit_speed.py --shards 20 --rows-per-shard 50 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

import raycache
from raycache._cache.store import Store
from raycache._train.driver.checks import check
from raycache._train.driver.checks import load_config as load_train

DIM = 8


def encoder(in_dim: int = DIM, out_dim: int = 16) -> torch.nn.Module:
    """A fixed (seeded) linear projection: encoding costs next to nothing."""
    torch.manual_seed(0)
    return torch.nn.Linear(in_dim, out_dim)


def source(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(rows, DIM)).astype(np.float32)
    pq.write_table(pa.table({
        "id": [f"r{i:08d}" for i in range(rows)],
        "features": pa.FixedSizeListArray.from_arrays(pa.array(feats.reshape(-1)), DIM),
        "label": pa.array(rng.integers(0, 4, rows), pa.int64()),
    }), path)


def fill_config(name: str, src: Path, store: str, rows_per_shard: int) -> dict:
    return {"name": name, "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "proj", "kind": "torch", "input": "features",
                          "factory": f"{__name__}:encoder" if __name__ != "__main__"
                          else "hit_speed:encoder"}],
            "store": {"uri": store}, "rows_per_shard": rows_per_shard, "in_process": True,
            "progress": False}


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=20, help="N: shards of the small cache")
    parser.add_argument("--rows-per-shard", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--store", default=None, help="store URI (a temporary folder if left out)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or str(Path(tmp) / "store")
        rows: dict[str, dict[str, float]] = {}
        for label, shards in (("N", args.shards), ("10N", 10 * args.shards)):
            src = Path(tmp) / f"{label}.parquet"
            source(src, shards * args.rows_per_shard)
            cfg = fill_config(f"hit-{label}", src, store, args.rows_per_shard)
            t = time.perf_counter()
            first = raycache.fill(cfg)
            assert not first.hit and len(first.cache.manifest.shards) == shards
            miss = time.perf_counter() - t
            assert raycache.fill(cfg).hit
            train_cfg = load_train({"cache": f"hit-{label}", "store": {"uri": store}})
            rows[label] = {
                "shards": shards, "miss": miss,
                "hit": median_s(lambda cfg=cfg: raycache.fill(cfg), args.repeats),
                "open_cache": median_s(lambda n=cfg["name"]: raycache.open_cache(n, store),
                                       args.repeats),
                "train open": median_s(lambda c=train_cfg: check(c, Store.from_config(c.store)),
                                       args.repeats),
            }
        n, big = rows["N"], rows["10N"]
        print(f"{args.rows_per_shard} rows per shard, median of {args.repeats}; store {store}")
        print(f"{'':<12}{n['shards']:>8} shards{big['shards']:>8} shards   ratio 10N:N")
        for key in ("miss", "hit", "open_cache", "train open"):
            print(f"{key:<12}{n[key] * 1e3:>11.1f} ms{big[key] * 1e3:>11.1f} ms"
                  f"{big[key] / n[key]:>12.2f}x")


if __name__ == "__main__":
    main()
