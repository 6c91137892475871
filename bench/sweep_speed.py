"""Benchmark: a sweep of 16 linear heads in one pass against one linear head, wall time.

On a cache of 384-d embeddings (random rows clustered by class, filled through the normal
torch-module path with an identity encoder), one run times `raycache.train` of one linear head
and of a 4 lr x 4 weight_decay sweep, same epochs and batch, interleaved and repeated, and
prints the ratios of the run's wall time and of its epochs' compute (train + validation).

    python bench/sweep_speed.py --rows 5000 --epochs 10
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

DIM, CLASSES = 384, 10
SWEEP = {"lr": [3e-4, 1e-3, 3e-3, 1e-2], "weight_decay": [0.0, 1e-4, 1e-3, 1e-2]}


def source(folder: Path, rows: int) -> None:
    """Rows whose 384-d features cluster by class, in one Parquet file."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, rows)
    feats = rng.normal(0, 1, (CLASSES, DIM))[labels] + rng.normal(0, 8, (rows, DIM))
    pq.write_table(pa.table({
        "id": [f"row-{i:06d}" for i in range(rows)],
        "features": pa.FixedSizeListArray.from_arrays(
            pa.array(feats.astype(np.float32).reshape(-1)), DIM),
        "label": pa.array(labels, pa.int64()),
    }), folder / "rows.parquet")


def timed(config: dict) -> tuple[float, float, object]:
    """(wall s of raycache.train, s of its epochs' compute, the result)."""
    start = time.perf_counter()
    run = raycache.train(config)
    wall = time.perf_counter() - start
    return wall, sum(m["epoch_seconds"] for m in run.history), run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--placement", default="cpu", help="cpu (in memory) or stream")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        source(root / "src", args.rows)
        raycache.fill({
            "name": "bench", "store": {"uri": str(root / "store")}, "progress": False,
            "source": {"path": str(root / "src"), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "emb", "kind": "torch", "input": "features",
                          "factory": "torch.nn:Identity"}],
            "rows_per_shard": 1000,
        })
        base = {"cache": "bench", "store": {"uri": str(root / "store")}, "epochs": args.epochs,
                "batch_size": args.batch, "lr": 1e-3, "num_workers": 0, "progress": False,
                "placement": args.placement, "checkpoint_seconds": 0, "resume": False}
        timed(base)  # warm-up: imports, first-run costs
        one, many = [], []
        for _ in range(args.repeat):
            one.append(timed(base))
            many.append(timed({**base, "sweep": SWEEP}))
    wall1, wall16 = (statistics.median(t[0] for t in ts) for ts in (one, many))
    comp1, comp16 = (statistics.median(t[1] for t in ts) for ts in (one, many))
    best = many[-1][2]
    print(f"{args.rows} rows x {DIM}-d, {args.epochs} epochs, batch {args.batch}, "
          f"placement {args.placement}, {args.threads} torch thread(s), median of {args.repeat}")
    print(f"one linear head           wall {wall1:7.2f} s   epochs' compute {comp1:7.2f} s")
    print(f"sweep of 16 linear heads  wall {wall16:7.2f} s   epochs' compute {comp16:7.2f} s")
    print(f"ratio sweep16 : one       wall {wall16 / wall1:6.2f}x   epochs' compute "
          f"{comp16 / comp1:6.2f}x   (16 separate runs: 16x)")
    print(f"best: {best.best['settings']} val_loss {best.best['val_loss']:.4f}, "
          f"val_acc {best.best['metrics']['val_acc']:.3f}")


if __name__ == "__main__":
    main()
