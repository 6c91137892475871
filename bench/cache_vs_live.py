"""Benchmark: E epochs of head training from the cache vs with the encoder run live every epoch.

Measured in one run on the same machine (these machines are noisy, so only ratios mean much):
  fill         raycache.fill: MiniLM in Ray Data actors, shards + manifest written
  cached/ray   raycache.train: E epochs, DDP workers, from the committed cache
  cached/loop  a plain single-process loop over the cached embeddings (no Ray)
  live/loop    the same loop, but encoding every batch with the frozen encoder every epoch,
               the way people train without a cache

    python bench/cache_vs_live.py --rows 300 --epochs 5
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from plain import docs, parser, step

import raycache
from raycache._cli.demo_run import MODEL
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from raycache._heads.specs import HEADS


def head_epochs(batches, epochs: int, num_classes: int, encode=None) -> float:
    """Train a linear head for `epochs` over `batches`; encode each batch first when asked."""
    torch.manual_seed(0)
    head = HEADS["linear"](384, num_classes, [], 0.0)
    opt = torch.optim.AdamW(head.parameters(), lr=0.01)
    start = time.perf_counter()
    for _ in range(epochs):
        for x, y in batches:
            if encode is not None:
                x = torch.from_numpy(encode(x))
            step(opt, torch.nn.functional.cross_entropy(head(x), y))
    return time.perf_counter() - start


def main() -> None:
    arguments = parser(__doc__, epochs=5)
    arguments.add_argument("--workers", type=int, default=2)
    args = arguments.parse_args()
    table = docs(args.rows)
    num_classes = 6
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "docs.parquet")
        pq.write_table(table, src)
        store = str(Path(tmp, "store"))
        fill = raycache.fill({
            "name": "bench", "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": {"uri": store},  # encoder pool, threads and batching: auto
        }, progress=False)
        fill_s = fill.cache.manifest.fill_seconds
        run = raycache.train({
            "cache": "bench", "store": {"uri": store}, "epochs": args.epochs,
            "batch_size": args.batch_size, "lr": 0.01, "num_workers": args.workers,
        }, progress=False)
        cached = fill.cache.read_table(columns=["minilm", "label"])
    emb = np.stack(cached.column("minilm").to_numpy(zero_copy_only=False)).astype(np.float32)
    labels = torch.tensor(cached.column("label").to_numpy())
    bs = args.batch_size
    cached_batches = [(torch.from_numpy(emb[i:i + bs]), labels[i:i + bs])
                      for i in range(0, len(labels), bs)]
    cached_loop_s = head_epochs(cached_batches, args.epochs, num_classes)

    encoder = ENCODERS["hf-text"].load(
        EncoderConfig(name="minilm", kind="hf-text", input="text", path=MODEL), "cpu")
    texts = table.column("text").combine_chunks()
    label_all = torch.tensor(table.column("label").to_numpy())
    live_batches = [(texts.slice(i, bs), label_all[i:i + bs]) for i in range(0, len(texts), bs)]
    live_s = head_epochs(live_batches, args.epochs, num_classes, encode=encoder.encode)

    print(f"\nrows={args.rows} epochs={args.epochs} batch={bs} torch_threads=2 "
          f"ddp_workers={args.workers}")
    print(f"fill (once)                      {fill_s:8.1f} s  ({args.rows / fill_s:.1f} rows/s)")
    print(f"cached/ray  {args.epochs} epochs (raycache)   {run.seconds:8.1f} s")
    print(f"cached/loop {args.epochs} epochs (one proc)   {cached_loop_s:8.3f} s")
    print(f"live/loop   {args.epochs} epochs (one proc)   {live_s:8.1f} s")
    print(f"ratio live/loop : cached/loop            {live_s / cached_loop_s:8.0f}x")
    print(f"ratio live/loop : fill + cached/loop     {live_s / (fill_s + cached_loop_s):8.2f}x")
    print(f"ratio live/loop : fill + cached/ray      {live_s / (fill_s + run.seconds):8.2f}x")
    per_epoch_live = live_s / args.epochs
    print(f"break-even: the cache pays for itself after "
          f"{(fill_s / max(per_epoch_live - cached_loop_s / args.epochs, 1e-9)):.1f} epochs "
          f"(single-process loop)")


if __name__ == "__main__":
    main()
