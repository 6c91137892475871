"""GPU benchmark: a BERT-base-sized encoder (random weights, made here) filled by a Ray Data GPU
actor vs the same encoder run in one plain process on the same GPU; then head epochs with the
cache in device memory vs streamed from the store.

    python bench/gpu_fill.py --rows 20000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

import raycache
from raycache._encoders import ENCODERS
from raycache._encoders.batching import Batching
from raycache._encoders.config import EncoderConfig

WORDS = ["return", "the", "cosine", "of", "x", "open", "a", "socket", "to", "host", "copy",
         "file", "with", "its", "metadata", "sleep", "for", "while", "join", "worker", "threads",
         "format", "date", "as", "text", "parse", "url", "and", "read", "lines"]


def make_model(folder: Path) -> None:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir()
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS))]) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=5 + len(set(WORDS)))).save_pretrained(folder)  # base size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, 12)) for _ in range(args.rows)]
    labels = rng.integers(0, 4, args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp, "bert")
        make_model(model)
        src = Path(tmp, "src.parquet")
        pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts, "label": labels}), src)
        enc = {"name": "bert", "kind": "hf-text", "input": "text", "path": str(model),
               "max_length": 32}
        store = str(Path(tmp, "store"))
        fill = raycache.fill({"name": "b", "source": {"path": str(src), "labels": ["label"]},
                              "encoders": [enc], "store": {"uri": store},
                              "num_gpus": 1, "rows_per_shard": 8192}, progress=False)
        fill_s = fill.cache.manifest.fill_seconds
        encoder = ENCODERS["hf-text"].load(EncoderConfig(**enc), "cuda", Batching(4096, 65536))
        column = pa.array(texts)
        encoder.encode(column.slice(0, args.batch_size))  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(0, args.rows, args.batch_size):
            encoder.encode(column.slice(i, args.batch_size))
        plain_s = time.perf_counter() - start
        times = {}
        for placement in ("gpu", "stream"):
            run = raycache.train({"cache": "b", "store": {"uri": store}, "epochs": args.epochs,
                                  "batch_size": 1024, "num_workers": 1, "use_gpu": True,
                                  "cpus_per_worker": 2, "placement": placement,
                                  "resume": False}, progress=False)
            times[placement] = sum(m["epoch_seconds"] for m in run.history)
    print(f"\nrows={args.rows} device={torch.cuda.get_device_name()}")
    print(f"fill, 1 GPU actor (Ray Data, incl. actor start)  {fill_s:7.2f} s "
          f"{args.rows / fill_s:9.0f} rows/s")
    print(f"fill after start-up ({fill.first_shard_seconds:4.1f} s to first shard)    "
          f"{'':7} {fill.encode_rows_per_second:9.0f} rows/s")
    print(f"plain loop, same encoder, same GPU               {plain_s:7.2f} s "
          f"{args.rows / plain_s:9.0f} rows/s")
    print(f"ratio fill / plain                               {fill_s / plain_s:7.2f}x")
    print(f"{args.epochs} head epochs, cache in GPU memory            {times['gpu']:7.3f} s")
    print(f"{args.epochs} head epochs, streamed from the store        {times['stream']:7.3f} s")
    ratio = times["stream"] / times["gpu"]
    print(f"ratio stream / gpu                               {ratio:7.1f}x")


if __name__ == "__main__":
    main()
