"""Benchmark: training on the first pass (pipeline overlap: true) vs fill then train, one run.

Both pipelines fill the same stdlib-docs texts with the real all-MiniLM-L6-v2 (in-process, a
fresh store each, so both miss) and train the same linear head for E epochs with the same seed,
in local mode or, with --num-workers N, on N DDP workers of an in-process Ray cluster; printed:
each one's wall time, the saving, and the final validation metrics of both (the overlapped
run's epoch 1 sees shards in landing order, i.e. source order: the rows are shuffled first,
unless --sorted keeps them sorted by key, which groups them by topic). The order of the two
runs alternates over --repeats; a warm-up fill and train first, so neither pays the imports.

    python bench/overlap.py --per-topic 60 --epochs 5 [--sorted] [--num-workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from raycache._cli.demo_run import MODEL
from raycache._pipeline import pipeline
from raycache._source.demo_data import stdlib_docs

THREADS = 2


def config(src: Path, store: Path, epochs: int, rows_per_shard: int, overlap: bool,
           workers: int) -> dict:
    fill = {"name": "docs", "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": {"uri": str(store)}, "rows_per_shard": rows_per_shard, "progress": False,
            "in_process": True}
    train = {"epochs": epochs, "batch_size": 32, "lr": 0.01, "num_workers": workers,
             "placement": "cpu", "progress": False, "checkpoint_seconds": 0}
    return {"fill": fill, "train": train, "overlap": overlap}


def timed(cfg: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    result = pipeline(cfg)
    return time.perf_counter() - t0, result.train.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-topic", type=int, default=60, help="texts per topic (6 topics)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rows-per-shard", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=0,
                        help="DDP workers (0: local mode, no Ray cluster)")
    parser.add_argument("--sorted", action="store_true",
                        help="keep the source sorted by key (grouped by label)")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    docs = stdlib_docs(per_topic=args.per_topic).select(["id", "text", "label"])
    if not args.sorted:
        docs = docs.take(np.random.default_rng(0).permutation(docs.num_rows))
    walls: dict[bool, list[float]] = {False: [], True: []}
    last: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "docs.parquet")
        pq.write_table(docs, src)
        warm = Path(tmp, "warm.parquet")
        pq.write_table(docs.slice(0, 20), warm)
        # imports, model files cached, Ray started
        timed(config(warm, Path(tmp, "warm"), 1, 20, False, args.num_workers))
        for i in range(args.repeats):
            for overlap in ([False, True] if i % 2 == 0 else [True, False]):
                store = Path(tmp, f"store-{i}-{overlap}")
                wall, last[overlap] = timed(config(src, store, args.epochs,
                                                   args.rows_per_shard, overlap,
                                                   args.num_workers))
                walls[overlap].append(wall)
    seq, ovl = statistics.median(walls[False]), statistics.median(walls[True])
    order = "sorted by label" if args.sorted else "shuffled"
    mode = f"{args.num_workers} DDP workers" if args.num_workers else "local mode"
    print(f"{docs.num_rows} rows, MiniLM in-process, {args.epochs} epochs {mode}, "
          f"shards of {args.rows_per_shard} rows, source {order}, median of {args.repeats}")
    print(f"fill then train          {seq:7.1f} s")
    print(f"overlapped (first pass)  {ovl:7.1f} s")
    print(f"saved                    {seq - ovl:7.1f} s  ({1 - ovl / seq:.1%} of the wall time)")
    for metric in ("val_loss", "val_acc"):
        a, b = last[False][metric], last[True][metric]
        print(f"final {metric:9s} fill-then-train {a:.4f}  overlapped {b:.4f}  "
              f"difference {b - a:+.4f}")


if __name__ == "__main__":
    main()
