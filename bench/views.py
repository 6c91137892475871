"""Benchmark: K cached augmentation views + E epochs vs re-encoding augmented inputs every epoch.

Measured in one run on the same machine (these machines are noisy, so only ratios mean much):
  fill/plain   raycache.fill without views (the clean embeddings only), for reference
  fill/views   raycache.fill with K views per row (clean + K augmented texts encoded)
  views/ray    raycache.train: E epochs drawing one cached view per row per epoch
  views/loop   a plain one-process loop doing the same over the cached views (no Ray)
  live/loop    the same loop, but augmenting each row afresh and encoding every batch with the
               frozen encoder every epoch: dynamic augmentation without a cache

    python bench/views.py --rows 300 --views 4 --epochs 8
"""

from __future__ import annotations

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
from raycache._fill.augment import apply
from raycache._heads.specs import HEADS

AUGMENT = [{"kind": "word_dropout", "p": 0.1}, {"kind": "word_swap", "swaps": 1},
           {"kind": "crop", "max_words": 64}]


def head_epochs(epochs: int, num_classes: int, dim: int, batches) -> float:
    """Train a linear head for `epochs`; `batches(epoch)` yields that epoch's (x, y)."""
    torch.manual_seed(0)
    head = HEADS["linear"](dim, num_classes, [], 0.0)
    opt = torch.optim.AdamW(head.parameters(), lr=0.01)
    start = time.perf_counter()
    for epoch in range(epochs):
        for x, y in batches(epoch):
            step(opt, torch.nn.functional.cross_entropy(head(x), y))
    return time.perf_counter() - start


def main() -> None:
    arguments = parser(__doc__, epochs=8)
    arguments.add_argument("--views", type=int, default=4)
    args = arguments.parse_args()
    table = docs(args.rows)
    k, bs, classes = args.views, args.batch_size, 6
    encoder_cfg = {"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}
    # loaded first: the live loop's encoder, and the imports (transformers) both fills share
    encoder = ENCODERS["hf-text"].load(EncoderConfig(**encoder_cfg), "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "docs.parquet")
        pq.write_table(table, src)
        base = {"name": "bench", "source": {"path": str(src), "labels": ["label"]},
                "encoders": [encoder_cfg], "reuse": False}
        plain = raycache.fill({**base, "store": {"uri": f"{tmp}/plain"}}, progress=False)
        store = f"{tmp}/views"
        filled = raycache.fill({**base, "store": {"uri": store},
                                "views": {"count": k, "augment": AUGMENT}}, progress=False)
        run = raycache.train({"cache": "bench", "store": {"uri": store}, "epochs": args.epochs,
                              "batch_size": bs, "lr": 0.01, "num_workers": 0}, progress=False)
        cached = filled.cache.read_table(columns=["minilm@views", "label"])
    labels = torch.tensor(cached.column("label").to_numpy())
    views = np.stack(cached.column("minilm@views").to_numpy(zero_copy_only=False))
    views = torch.from_numpy(views.reshape(len(labels), k, -1).astype(np.float32))
    dim, n = views.shape[2], len(labels)

    def cached_batches(epoch: int):
        g = torch.Generator().manual_seed(epoch)
        x = views[torch.arange(n), torch.randint(k, (n,), generator=g)]
        for i in range(0, n, bs):
            yield x[i:i + bs], labels[i:i + bs]

    views_loop_s = head_epochs(args.epochs, classes, dim, cached_batches)

    texts = table.column("text").to_pylist()
    live_labels = torch.tensor(table.column("label").to_numpy())

    def live_batches(epoch: int):
        for i in range(0, n, bs):
            aug = [apply(t, np.random.default_rng([epoch, i + j]), AUGMENT)
                   for j, t in enumerate(texts[i:i + bs])]
            yield torch.from_numpy(encoder.encode(pa.array(aug))), live_labels[i:i + bs]

    live_s = head_epochs(args.epochs, classes, dim, live_batches)

    plain_s, views_s = plain.cache.manifest.fill_seconds, filled.cache.manifest.fill_seconds
    print(f"\nrows={n} views={k} epochs={args.epochs} batch={bs} torch_threads=2 "
          f"augment={[a['kind'] for a in AUGMENT]}")
    print(f"fill/plain (clean only, once)       {plain_s:8.1f} s")
    print(f"fill/views (clean + {k} views, once)  {views_s:8.1f} s  "
          f"({views_s / plain_s:.1f}x the plain fill)")
    print(f"views/ray  {args.epochs} epochs (raycache)      {run.seconds:8.1f} s  "
          f"val_acc {run.metrics['val_acc']:.3f}")
    print(f"views/loop {args.epochs} epochs (one proc)      {views_loop_s:8.3f} s")
    print(f"live/loop  {args.epochs} epochs (one proc)      {live_s:8.1f} s")
    print(f"ratio live/loop : fill/views + views/loop   {live_s / (views_s + views_loop_s):8.2f}x")
    print(f"ratio live/loop : fill/views + views/ray    {live_s / (views_s + run.seconds):8.2f}x")
    per_epoch = live_s / args.epochs - views_loop_s / args.epochs
    print(f"break-even: the views pay for themselves after {views_s / per_epoch:.1f} epochs "
          f"(one-process loop); live augmentation draws a new variant every epoch, the cache "
          f"{k}")


if __name__ == "__main__":
    main()
