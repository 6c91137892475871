"""Benchmark: a frozen encoder cached beside a trainable one run live, vs both run live every epoch.

Measured in one run on the same machine (these machines are noisy, so only ratios mean much):
  fill          raycache.fill: MiniLM encoded once; the trainable encoder's input kept as is
  cached+live   raycache.train (in-process): E epochs, MiniLM read from the cache, the
                trainable encoder (a small MLP over 8 text statistics) run and trained live
  cached only   the same, on the MiniLM column alone (what the trainable encoder adds)
  live/loop     a plain one-process loop: MiniLM run every batch of every epoch (no gradients)
                beside the same MLP, trained the same way: training without the cache

    python bench/trainable.py --rows 300 --epochs 5
"""

from __future__ import annotations

import string
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from plain import docs, parser, step

import raycache
from raycache._cli.demo_run import MODEL
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from raycache._heads.specs import HEADS

STATS = 8


def stats_mlp(in_dim: int = STATS, out_dim: int = 32) -> torch.nn.Module:
    """The trainable encoder: a small MLP over a row's text statistics (seeded)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(in_dim, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, out_dim))


def text_stats(texts: list[str]) -> np.ndarray:
    """8 cheap numbers per text (log length, words, digits, capitals, punctuation, ...)."""
    def one(t: str) -> list[float]:
        n = max(len(t), 1)
        return [np.log1p(len(t)), np.log1p(len(t.split())), sum(c.isdigit() for c in t) / n,
                sum(c.isupper() for c in t) / n, sum(c in string.punctuation for c in t) / n,
                t.count("(") / n, t.count(".") / n, sum(c.isspace() for c in t) / n]
    return np.asarray([one(t) for t in texts], np.float32)


def live_loop(texts: pa.Array, stats: np.ndarray, labels: torch.Tensor, epochs: int, bs: int,
              classes: int) -> float:
    """Both encoders live every epoch: MiniLM under no_grad, the MLP and the head trained."""
    encoder = ENCODERS["hf-text"].load(
        EncoderConfig(name="minilm", kind="hf-text", input="text", path=MODEL), "cpu")
    mlp = stats_mlp()
    torch.manual_seed(0)
    head = HEADS["linear"](384 + 32, classes, [], 0.0)
    opt = torch.optim.AdamW([{"params": head.parameters()},
                             {"params": mlp.parameters(), "lr": 1e-3}], lr=0.01)
    start = time.perf_counter()
    for _ in range(epochs):
        for i in range(0, len(labels), bs):
            frozen = torch.from_numpy(encoder.encode(texts.slice(i, bs)))
            x = torch.cat([frozen, mlp(torch.from_numpy(stats[i:i + bs]))], dim=1)
            step(opt, torch.nn.functional.cross_entropy(head(x), labels[i:i + bs]))
    return time.perf_counter() - start


def main() -> None:
    args = parser(__doc__, epochs=5).parse_args()
    table = docs(args.rows)
    texts = table.column("text").combine_chunks()
    stats = text_stats(texts.to_pylist())
    table = table.append_column("stats", pa.FixedSizeListArray.from_arrays(
        pa.array(stats.reshape(-1)), STATS))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "docs.parquet")
        pq.write_table(table, src)
        store = str(Path(tmp, "store"))
        fill = raycache.fill({
            "name": "bench", "source": {"path": str(src), "labels": ["label"]},
            "encoders": [
                {"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL},
                {"name": "stats", "kind": "torch", "input": "stats",
                 "factory": "trainable:stats_mlp", "trainable": True}],
            "store": {"uri": store}, "in_process": True,
        }, progress=False)
        fill_s = fill.cache.manifest.fill_seconds
        run = raycache.train({
            "cache": "bench", "store": {"uri": store}, "epochs": args.epochs,
            "batch_size": args.batch_size, "lr": 0.01, "encoder_lr": 1e-3, "num_workers": 0,
            "val_fraction": 0.01,
        }, progress=False)
        train_s = sum(h["epoch_seconds"] for h in run.history)
        frozen = raycache.train({
            "cache": "bench", "store": {"uri": store}, "epochs": args.epochs,
            "batch_size": args.batch_size, "lr": 0.01, "num_workers": 0, "val_fraction": 0.01,
            "encoders": ["minilm"],
        }, progress=False)
        frozen_s = sum(h["epoch_seconds"] for h in frozen.history)
    labels = torch.tensor(table.column("label").to_numpy())
    live_s = live_loop(texts, stats, labels, args.epochs, args.batch_size, 6)

    print(f"\nrows={args.rows} epochs={args.epochs} batch={args.batch_size} torch_threads=2")
    print(f"fill (once, MiniLM cached, stats kept)     {fill_s:8.1f} s")
    print(f"cached+live {args.epochs} epochs, epochs only      {train_s:8.2f} s")
    print(f"cached+live {args.epochs} epochs, raycache.train   {run.seconds:8.2f} s")
    print(f"cached only {args.epochs} epochs, epochs only      {frozen_s:8.2f} s  "
          "(MiniLM column alone, for reference)")
    print(f"live/loop   {args.epochs} epochs (both live)       {live_s:8.1f} s")
    print(f"ratio live/loop : cached+live epochs            {live_s / train_s:8.1f}x")
    print(f"ratio live/loop : fill + raycache.train         "
          f"{live_s / (fill_s + run.seconds):8.2f}x")


if __name__ == "__main__":
    main()
