"""Benchmark: what raycache's training costs on top of the compute, all measured in one run.

  placement    raycache's epoch rows/s (cpu, stream; gpu where there is one) vs a plain
               one-process loop over a preloaded tensor (same head, batch, optimizer), on a
               ~5k-row cache
  overhead     per-epoch wall / compute, in-process (local mode) and with 2 DDP workers; a warm
               run (fill hit + E epochs) vs a plain loop reading the same cache, each a fresh
               Python process from its start (start-up included), median of --repeats
  vs live      fill + E epochs vs the encoder run live every epoch (shuffled training batches,
               as a loop without a cache runs it), as a fraction of the ideal ratio
               E(enc + head) / (enc + E*head), on the stdlib-docs set

    python bench/train_speed.py --epochs 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

import raycache
from raycache._cli.demo_run import MODEL
from raycache._encoders import ENCODERS
from raycache._encoders.config import EncoderConfig
from raycache._source.demo_data import stdlib_docs

BATCH, LR, THREADS = 64, 0.01, 2

PLAIN = """
import sys
import pyarrow as pa, pyarrow.parquet as pq, torch
torch.set_num_threads({threads})
files, epochs, batch, lr = sys.argv[1].split(","), int(sys.argv[2]), {batch}, {lr}
t = pa.concat_tables(pq.read_table(f, columns=["minilm", "label"]) for f in files)
col = t.column("minilm").combine_chunks()
x = torch.tensor(col.flatten().to_numpy().reshape(len(col), -1))
y = torch.from_numpy(t.column("label").to_numpy())
keep = int(len(y) * 0.8)
x, y = x[:keep], y[:keep]
torch.manual_seed(0)
head = torch.nn.Sequential(torch.nn.Dropout(0.0), torch.nn.Linear(x.shape[1], int(y.max()) + 1))
opt = torch.optim.AdamW(head.parameters(), lr=lr)
for epoch in range(epochs):
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
    for i in range(0, len(y), batch):
        idx = order[i:i + batch]
        loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
"""

RAYCACHE = """
import json, sys
import torch
torch.set_num_threads({threads})
import raycache
fill, train = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert raycache.fill(fill, progress=False).hit
raycache.train(train)
"""


def plain_loop(x: torch.Tensor, y: torch.Tensor, epochs: int) -> float:
    """Seconds for `epochs` of the linear head over a preloaded tensor, shuffled each epoch."""
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.Dropout(0.0), torch.nn.Linear(x.shape[1],
                                                                      int(y.max()) + 1))
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
    col = t.column("minilm").combine_chunks()
    x = torch.tensor(col.flatten().to_numpy().reshape(len(col), -1))
    return x, torch.from_numpy(t.column("label").to_numpy())


def steady(run) -> tuple[float, float]:
    """(median rows/s, median epoch compute s) over the epochs after the first."""
    later = run.history[1:] or run.history
    return (statistics.median(m["rows_per_s"] for m in later),
            statistics.median(m["epoch_seconds"] for m in later))


def per_epoch_wall(run) -> float:
    """Mean wall time between consecutive epochs' ends (compute + all-reduce + logging)."""
    walls = [m["wall_s"] for m in run.history]
    return (walls[-1] - walls[0]) / max(len(walls) - 1, 1)


def fresh_process(code: str, *args: str) -> float:
    """Wall seconds of `python -c code args` from launch to exit."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def copies(table: pa.Table, times: int) -> pa.Table:
    """`times` copies of the texts, each marked, so every row is a distinct input."""
    parts = [pa.table({"id": pa.array([f"{k}#{i}" for k in table.column("id").to_pylist()]),
                       "text": pa.array([f"[{i}] {t}" for t in table.column("text").to_pylist()]),
                       "label": table.column("label")}) for i in range(times)]
    return pa.concat_tables(parts)


def fill_config(name: str, src: Path, store: dict) -> dict:
    return {"name": name, "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": store}  # encoder pool, threads and batching: auto


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--copies", type=int, default=3,
                        help="copies of the stdlib-docs texts in the placement/warm-run cache")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    E = args.epochs
    docs = stdlib_docs(per_topic=1000)
    with tempfile.TemporaryDirectory() as tmp:
        store = {"uri": str(Path(tmp, "store"))}
        small, big = Path(tmp, "docs.parquet"), Path(tmp, "docs-x.parquet")
        pq.write_table(docs.select(["id", "text", "label"]), small)
        pq.write_table(copies(docs, args.copies), big)
        t0 = time.perf_counter()
        filled = raycache.fill(fill_config("docs", small, store), progress=False)
        fill_wall = time.perf_counter() - t0
        big_fill = fill_config("docs-x", big, store)
        cache = raycache.fill(big_fill, progress=False).cache
        train = {"cache": "docs-x", "store": store, "epochs": E, "batch_size": BATCH, "lr": LR,
                 "progress": False, "resume": False, "checkpoint_seconds": 0}
        small_train = {**train, "cache": "docs", "placement": "cpu"}
        t0 = time.perf_counter()
        raycache.train(small_train)
        small_wall = time.perf_counter() - t0
        runs = {"cpu (in-process)": raycache.train({**train, "placement": "cpu"}),
                "stream (in-process)": raycache.train({**train, "placement": "stream"})}
        runs["cpu (2 DDP workers)"] = raycache.train(
            {**train, "placement": "cpu", "num_workers": 2, "cpus_per_worker": 0.5})
        if torch.cuda.is_available():
            runs["gpu (1 worker)"] = raycache.train(
                {**train, "placement": "gpu", "use_gpu": True, "num_workers": 1})
        files = ",".join(cache.store.url(p) for p in cache.shard_paths())
        plain_code = PLAIN.format(threads=THREADS, batch=BATCH, lr=LR)
        ours_code = RAYCACHE.format(threads=THREADS)
        plain_s, ours_s = [], []
        for _ in range(args.repeats):
            plain_s.append(fresh_process(plain_code, files, str(E)))
            ours_s.append(fresh_process(ours_code, json.dumps(big_fill), json.dumps(train)))
        x, y = read_cached(cache)
        small_x, small_y = read_cached(filled.cache)
    n_train = runs["cpu (in-process)"].metrics["train_rows"]
    loop_s = plain_loop(x[:n_train], y[:n_train], E)
    loop_rows_s = n_train * E / loop_s

    encoder = ENCODERS["hf-text"].load(
        EncoderConfig(name="minilm", kind="hf-text", input="text", path=MODEL), "cpu")
    texts = docs.column("text").combine_chunks()
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    for i in range(0, len(texts), BATCH):  # one live epoch: the training batches, shuffled
        encoder.encode(texts.take(pa.array(order[i:i + BATCH].numpy())))
    enc = time.perf_counter() - t0
    head_epoch = plain_loop(small_x, small_y, E) / E

    print(f"\ncache docs-x: {len(y)} rows ({args.copies} marked copies of stdlib-docs), "
          f"{int(y.max()) + 1} classes, MiniLM 384-d, linear head, batch {BATCH}, AdamW, "
          f"{E} epochs, torch threads {THREADS}")
    print(f"\n{'placement':<24}{'rows/s':>10}{'vs plain loop':>16}")
    print(f"{'plain loop (tensor)':<24}{loop_rows_s:>10.0f}{1.0:>15.2f}x")
    for name, run in runs.items():
        rows_s, _ = steady(run)
        print(f"{name:<24}{rows_s:>10.0f}{rows_s / loop_rows_s:>15.2f}x")
    cpu_rows_s, _ = steady(runs["cpu (in-process)"])
    stream_rows_s, _ = steady(runs["stream (in-process)"])
    print(f"stream / cpu in memory: {stream_rows_s / cpu_rows_s:.2f}")
    print("\noverhead")
    for name in ("cpu (in-process)", "cpu (2 DDP workers)"):
        run = runs[name]
        _, compute = steady(run)
        total = sum(m["epoch_seconds"] for m in run.history)
        print(f"  {name:<20} per-epoch wall / compute {per_epoch_wall(run) / compute:6.2f}x"
              f"   run wall {run.seconds:6.1f} s for {total:.2f} s of epoch compute")
    plain_med, ours_med = statistics.median(plain_s), statistics.median(ours_s)
    print(f"  warm run, fresh process each (median of {args.repeats}): raycache fill hit + "
          f"{E} epochs {ours_med:5.2f} s vs plain loop reading the cache {plain_med:5.2f} s: "
          f"{ours_med / plain_med:4.2f}x")
    print(f"    all: raycache {[round(s, 2) for s in ours_s]}, plain "
          f"{[round(s, 2) for s in plain_s]}")

    live = E * (enc + head_epoch)
    ideal = live / (enc + E * head_epoch)
    achieved = live / (fill_wall + small_wall)
    print(f"\nvs live on stdlib-docs ({len(texts)} rows): one live encoding epoch {enc:.1f} s "
          f"(shuffled batches of {BATCH}), one head epoch {head_epoch:.3f} s, fill "
          f"{fill_wall:.1f} s (start-up included), train {small_wall:.2f} s")
    print(f"  encoder live every epoch ({E} x (enc + head)) {live:8.1f} s")
    print(f"  raycache fill + {E} epochs in-process         {fill_wall + small_wall:8.1f} s")
    print(f"  ratio {achieved:.2f}x of an ideal {ideal:.2f}x: {achieved / ideal:.2f} of ideal")


if __name__ == "__main__":
    main()
