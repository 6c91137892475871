"""Benchmark: what raycache's training costs on top of the compute, all measured in one run.

  placement    raycache's epoch rows/s (cpu, stream; gpu where there is one) vs a plain
               one-process loop over a preloaded tensor (same head, batch, optimizer)
  overhead     wall vs compute: in-process (local mode) and DDP per-epoch wall / compute;
               a warm run (cache hit + E epochs) vs the plain loop with its cache read
  vs live      fill + E epochs vs the encoder run live every epoch, as a fraction of the
               ideal ratio E(enc + head) / (enc + E*head)

    python bench/train_speed.py --epochs 10
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

import raycache
from raycache.config import EncoderConfig
from raycache.demo import MODEL
from raycache.demo_data import stdlib_docs
from raycache.encoders import REGISTRY
from raycache.heads import REGISTRY as HEADS

BATCH, LR = 64, 0.01


def plain_loop(x: torch.Tensor, y: torch.Tensor, epochs: int, classes: int) -> float:
    """Seconds for `epochs` of the linear head over a preloaded tensor, shuffled each epoch."""
    torch.manual_seed(0)
    head = HEADS["linear"](x.shape[1], classes, [], 0.0)
    opt = torch.optim.AdamW(head.parameters(), lr=LR)
    start = time.perf_counter()
    for epoch in range(epochs):
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        for i in range(0, len(y), BATCH):
            idx = order[i:i + BATCH]
            loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return time.perf_counter() - start


def read_cached(cache) -> tuple[torch.Tensor, torch.Tensor]:
    t = cache.read_table(columns=["minilm", "label"])
    x = np.stack(t.column("minilm").to_numpy(zero_copy_only=False)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(t.column("label").to_numpy())


def steady(run) -> tuple[float, float]:
    """(median rows/s, median epoch compute s) over the epochs after the first."""
    later = run.history[1:] or run.history
    return (statistics.median(m["rows_per_s"] for m in later),
            statistics.median(m["epoch_seconds"] for m in later))


def per_epoch_wall(run) -> float:
    """Mean wall time between consecutive epochs' ends (compute + all-reduce + logging)."""
    walls = [m["wall_s"] for m in run.history]
    return (walls[-1] - walls[0]) / max(len(walls) - 1, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=0, help="0: all stdlib-docs rows")
    args = parser.parse_args()
    torch.set_num_threads(2)
    E = args.epochs
    table = stdlib_docs()
    if args.rows:
        table = table.slice(0, args.rows)
    classes = 6
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "docs.parquet")
        pq.write_table(table, src)
        store = {"uri": str(Path(tmp, "store"))}
        fill_cfg = {
            "name": "bench", "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": store,  # encoder pool, threads and batching: auto
        }
        t0 = time.perf_counter()
        filled = raycache.fill(fill_cfg, progress=False)
        fill_wall = time.perf_counter() - t0
        train = {"cache": "bench", "store": store, "epochs": E, "batch_size": BATCH, "lr": LR,
                 "progress": False, "resume": False, "checkpoint_seconds": 0}
        t0 = time.perf_counter()
        warm_fill = raycache.fill(fill_cfg, progress=False)
        local = raycache.train({**train, "placement": "cpu"})
        warm_wall = time.perf_counter() - t0
        assert warm_fill.hit
        stream = raycache.train({**train, "placement": "stream"})
        ddp = raycache.train({**train, "placement": "cpu", "num_workers": 2,
                              "cpus_per_worker": 0.5})
        gpu = None
        if torch.cuda.is_available():
            gpu = raycache.train({**train, "placement": "gpu", "use_gpu": True,
                                  "num_workers": 1})
        t0 = time.perf_counter()
        x, y = read_cached(filled.cache)
        read_s = time.perf_counter() - t0
    n_train = local.metrics["train_rows"]
    loop_s = plain_loop(x[:n_train], y[:n_train], E, classes)
    loop_rows_s = n_train * E / loop_s
    head_epoch = loop_s / E * len(y) / n_train

    encoder = REGISTRY["hf-text"].load(
        EncoderConfig(name="minilm", kind="hf-text", input="text", path=MODEL), "cpu")
    texts = table.column("text").combine_chunks()
    t0 = time.perf_counter()
    for i in range(0, len(texts), 32):
        encoder.encode(texts.slice(i, 32))
    enc = time.perf_counter() - t0  # one live encoding pass over every row

    print(f"\nstdlib-docs: {len(y)} rows, {classes} classes, MiniLM 384-d, linear head, "
          f"batch {BATCH}, AdamW, {E} epochs, torch threads 2")
    print(f"\n{'placement':<24}{'rows/s':>10}{'vs plain loop':>16}")
    print(f"{'plain loop (tensor)':<24}{loop_rows_s:>10.0f}{1.0:>15.2f}x")
    for name, run in (("cpu (in-process)", local), ("stream (in-process)", stream),
                      ("cpu (2 DDP workers)", ddp), ("gpu", gpu)):
        if run is not None:
            rows_s, _ = steady(run)
            print(f"{name:<24}{rows_s:>10.0f}{rows_s / loop_rows_s:>15.2f}x")
    print("\noverhead")
    for name, run in (("in-process", local), ("2 DDP workers", ddp)):
        _, compute = steady(run)
        total = sum(m["epoch_seconds"] for m in run.history)
        print(f"  {name:<14} per-epoch wall / compute  {per_epoch_wall(run) / compute:6.2f}x"
              f"   run wall {run.seconds:6.1f} s for {total:.2f} s of epoch compute")
    plain_warm = read_s + loop_s
    print(f"  warm run: cache hit + {E} epochs {warm_wall:6.2f} s vs plain loop with its cache "
          f"read {plain_warm:6.2f} s: {warm_wall / plain_warm:5.2f}x")
    live = E * (enc + head_epoch)
    ideal = live / (enc + E * head_epoch)
    achieved = live / (fill_wall + local.seconds)
    print(f"\nvs live: one encoding pass {enc:.1f} s, one head epoch {head_epoch:.3f} s, "
          f"fill {fill_wall:.1f} s, train {local.seconds:.2f} s")
    print(f"  encoder live every epoch ({E} x (enc + head)) {live:8.1f} s")
    print(f"  raycache fill + {E} epochs in-process         {fill_wall + local.seconds:8.1f} s")
    print(f"  ratio {achieved:.2f}x of an ideal {ideal:.2f}x: {achieved / ideal:.2f} of ideal")


if __name__ == "__main__":
    main()
