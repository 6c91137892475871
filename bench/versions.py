"""What a new version of a cache costs when it shares storage with the last one (not a test).

N rows of 16 float features in 8 Parquet files (bench/scale.py's source), a cheap torch encoder,
a running local Ray, the store on local disk. A full fill first; then, each against the version
before it, and each as a share of the full fill's time and of its bytes:
  edit one file   1% of the rows (all in one file) edited, the file rewritten in place
  append          a new file of 1% new rows
  edit every file 1% of the rows edited, spread over every file
Then the storage of the chain against as many whole copies; a chain of --chain versions, each
with 1% of the rows edited across every file, and training rows/s on its newest version against
the same rows written whole (in memory and streamed); gc --retain 1 and what it freed.

    python bench/versions.py                    # 1,000,000 rows, a chain of 20
    python bench/versions.py --rows 10000000 --chain 5 --skip train
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale import ROW_GROUP, fill_config, make_source, start_ray  # noqa: E402


def edit(folder: Path, share: float, files: list[int], seed: int) -> int:
    """Edit `share` of all rows (their features), spread over `files`, each file rewritten in
    place; returns the rows edited."""
    paths = sorted(folder.glob("*.parquet"))
    total = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    per = int(total * share) // len(files)
    rng = np.random.default_rng(seed)
    for f in files:
        table = pq.read_table(paths[f])
        x = table.column("features").combine_chunks().flatten().to_numpy().reshape(-1, 16).copy()
        x[rng.choice(len(x), per, replace=False)] += 1.0
        table = table.set_column(table.schema.get_field_index("features"), "features",
                                 pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16))
        pq.write_table(table, paths[f], row_group_size=ROW_GROUP)
    return per * len(files)


def append(folder: Path, rows: int, first_id: int, name: str) -> None:
    """A new file of `rows` new rows."""
    rng = np.random.default_rng(first_id)
    x = rng.standard_normal((rows, 16), dtype=np.float32)
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    pq.write_table(pa.table({
        "id": pa.array(ids), "label": pa.array((ids % 10).astype(np.int64)),
        "features": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16),
    }), folder / name, row_group_size=ROW_GROUP)


def disk(path: Path) -> int:
    """Bytes of every file under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(cfg: dict, store: Path):
    import raycache

    before = disk(store) if store.exists() else 0
    start = time.perf_counter()
    result = raycache.fill(cfg)
    return result, time.perf_counter() - start, disk(store) - before


def train_rate(store: Path, name: str, placement: str, epochs: int) -> float:
    """Median rows/s of epochs 2+ of a linear head in this process."""
    import raycache

    run = raycache.train({"cache": name, "store": {"uri": str(store)}, "epochs": epochs,
                          "batch_size": 1024, "num_workers": 0, "progress": False,
                          "val_fraction": 0.01, "placement": placement, "resume": False,
                          "run_name": f"bench-{placement}-{time.time_ns()}"})
    rates = [h["rows_per_s"] for h in run.history]
    return float(np.median(rates[1:] or rates))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--chain", type=int, default=20, help="versions of 1%% edits to train on")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--skip", nargs="*", default=[], choices=["train"],
                   help="train: no training on the newest version (10M rows take 15 GiB a load)")
    args = p.parse_args()
    ray = start_ray()
    import raycache

    n = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, store = tmp / "src", tmp / "store"
        make_source(src, n)
        cfg = fill_config("data", src, store)
        full, full_s, full_b = timed(cfg, store)
        print(f"rows {n:,}; {os.cpu_count()} CPUs, torch {torch.__version__}, "
              f"ray {ray.__version__}")
        print(f"full fill              {full_s:7.2f} s  {full_b / 2**20:9.1f} MiB written  "
              f"({full.cache.manifest.shard_count} shards, {full.pool})")
        changes = [("edit one file (1%)", lambda: edit(src, 0.01, [3], 1)),
                   ("append a file (1%)", lambda: append(src, n // 100, n, "part-new.parquet")),
                   ("edit every file (1%)", lambda: edit(src, 0.01, list(range(8)), 2))]
        for label, change in changes:
            change()
            r, s, b = timed(cfg, store)
            print(f"{label:<22} {s:7.2f} s  {b / 2**20:9.1f} MiB written  time {s / full_s:.3f}"
                  f"  bytes {b / full_b:.3f} of a full fill  ({r.encoded_rows:,} encoded, "
                  f"{r.reused_rows:,} reused, {r.shared_rows:,} shared)")
        versions = 1 + len(changes)
        print(f"storage of {versions} versions   {disk(store) / 2**20:9.1f} MiB, "
              f"{disk(store) / full_b:.2f}x one cache (whole copies: {versions:.2f}x)")

        for k in range(args.chain - versions):
            edit(src, 0.01, list(range(8)), 100 + k)
            r, s, b = timed(cfg, store)
        print(f"chain of {args.chain} versions: the last took {s:.2f} s and wrote "
              f"{b / 2**20:.1f} MiB; store {disk(store) / 2**20:.1f} MiB "
              f"({disk(store) / full_b:.2f}x one cache); newest reads "
              f"{r.cache.manifest.shard_count} shards, "
              f"{sum(1 for e in r.cache.manifest.shards if e.keep)} with a selection")
        whole = None if "train" in args.skip else \
            raycache.fill({**fill_config("whole", src, store), "share": False})
        assert whole is None or whole.cache.manifest.rows == r.cache.manifest.rows
        for placement in () if whole is None else ("cpu", "stream"):
            shared = train_rate(store, "data", placement, args.epochs)
            written = train_rate(store, "whole", placement, args.epochs)
            print(f"train {placement:<6} epochs 2+: newest version {shared:,.0f} rows/s, the same "
                  f"rows written whole {written:,.0f}: {shared / written:.2f}x")
        before = disk(store)
        freed = raycache.gc(str(store), retain=1, grace=None, delete=True)
        check = raycache.verify(raycache.open_cache("data", str(store)))
        print(f"gc --retain 1: reported {freed.bytes / 2**20:.1f} MiB, freed "
              f"{(before - disk(store)) / 2**20:.1f} MiB; newest version verify "
              f"{'OK' if check.ok else 'BAD'}")


if __name__ == "__main__":
    main()
