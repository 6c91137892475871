"""raycache at scale against the same work written by hand, measured in one run (not a test).

N rows of 16 float features (8 Parquet files, row groups of 65,536), a cheap torch encoder
(bench/cheap_encoder.py), and raycache's defaults. Reports, each against a baseline measured in
the same run:
  fill        a hand-written one-process loop (pyarrow iter_batches -> module -> pyarrow write,
              65,536-row batches, uncompressed) vs raycache.fill on a running local Ray
  driver RSS  the fill driver's peak RSS above its RSS before the fill, at N/4 and at N
  hit         a second fill of the same config (the committed cache found), at N/4 and N shards
  1% changed  the same rows with 1% of them changed, at a new path: fill cost / full fill cost
  train       epoch rows/s per placement (cpu, stream) vs a plain loop over a preloaded tensor;
              a warm run (hit + 2 epochs) vs a plain script that reads the shards and trains

    python bench/scale.py                      # 1,000,000 rows
    python bench/scale.py --rows 250000 --skip train
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import torch

HERE = Path(__file__).resolve().parent
FILES = 8
ROW_GROUP = 65_536


def make_source(folder: Path, rows: int, changed: float = 0.0, seed: int = 0) -> None:
    """`rows` rows in FILES Parquet files; with `changed`, that share of rows' features differ
    from the seed's (the same keys and labels)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    per = -(-rows // FILES)
    for f in range(FILES):
        lo, hi = f * per, min(rows, (f + 1) * per)
        x = rng.standard_normal((hi - lo, 16), dtype=np.float32)
        if changed:
            flip = np.random.default_rng(seed + 1 + f).random(hi - lo) < changed
            x[flip] += 1.0
        table = pa.table({
            "id": pa.array(np.arange(lo, hi, dtype=np.int64)),
            "label": pa.array((np.arange(lo, hi) % 10).astype(np.int64)),
            "features": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 16),
        })
        pq.write_table(table, folder / f"part-{f}.parquet", row_group_size=ROW_GROUP)


def hand_loop(src: Path, out: Path) -> float:
    """Rows/s of the plain loop: read batches, encode, write, in this one process."""
    from cheap_encoder import projection

    net = projection().eval()
    out.mkdir(parents=True)
    rows, start = 0, time.perf_counter()
    with torch.inference_mode():
        for path in sorted(src.glob("*.parquet")):
            with pq.ParquetWriter(out / path.name, _out_schema(), compression="none") as w:
                for batch in pq.ParquetFile(path).iter_batches(ROW_GROUP):
                    col = batch.column("features")
                    x = col.flatten().to_numpy().reshape(len(col), 16)
                    emb = net(torch.from_numpy(x)).numpy()
                    w.write_table(pa.table({
                        "id": batch.column("id"), "label": batch.column("label"),
                        "proj": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 384),
                    }))
                    rows += len(batch)
    return rows / (time.perf_counter() - start)


def _out_schema() -> pa.Schema:
    return pa.schema([("id", pa.int64()), ("label", pa.int64()),
                      ("proj", pa.list_(pa.float32(), 384))])


class PeakRSS:
    """This process's peak resident memory while the block runs, sampled every 50 ms."""

    def __enter__(self) -> PeakRSS:
        self.proc = psutil.Process()
        self.before = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def grown_mb(self) -> float:
        return (self.peak - self.before) / 2**20


def fill_config(name: str, src: Path, store: Path) -> dict:
    return {
        "name": name, "store": {"uri": str(store)},
        "source": {"path": str(src), "key": "id", "labels": ["label"]},
        "encoders": [{"name": "proj", "kind": "torch", "factory": "cheap_encoder:projection",
                      "input": "features"}],
        "progress": False,
    }


def timed_fill(cfg: dict):
    import raycache

    with PeakRSS() as rss:
        start = time.perf_counter()
        result = raycache.fill(cfg)
        seconds = time.perf_counter() - start
    return result, seconds, rss


def plain_training(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int) -> float:
    """Rows/s of a plain loop over a preloaded tensor: linear head, AdamW, shuffled batches."""
    head = torch.nn.Linear(x.shape[1], 10)
    opt = torch.optim.AdamW(head.parameters(), 1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        for idx in torch.randperm(len(x)).split(batch):
            loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return epochs * len(x) / (time.perf_counter() - start)


def read_shards(cache) -> tuple[torch.Tensor, torch.Tensor]:
    t = cache.read_table(columns=["label", "proj"])
    col = t.column("proj").combine_chunks()
    x = col.flatten().to_numpy().reshape(len(col), -1)
    return torch.from_numpy(x), torch.from_numpy(t.column("label").to_numpy())


def start_ray():
    """Ray started in this process, as on a running cluster, its workers finding the bench's
    encoder; torch on the machine's two cores. Returns the ray module."""
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    torch.set_num_threads(2)
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    return ray


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--epochs", type=int, default=3, help="of each placement's run")
    p.add_argument("--warm-epochs", type=int, default=2, help="of the warm run and its script")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--skip", nargs="*", default=[], choices=["quarter", "changed", "train"])
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    ray = start_ray()
    import raycache

    n = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_source(tmp / "src", n)
        base = hand_loop(tmp / "src", tmp / "hand")
        print(f"rows {n:,}; machine: {os.cpu_count()} CPUs, torch {torch.__version__}, "
              f"ray {ray.__version__}")
        print(f"fill   hand-written one-process loop      {base:>12,.0f} rows/s")
        if "quarter" not in args.skip:
            make_source(tmp / "quarter", n // 4)
            q, q_s, q_rss = timed_fill(fill_config("quarter", tmp / "quarter", tmp / "store"))
        full, full_s, full_rss = timed_fill(fill_config("scale", tmp / "src", tmp / "store"))
        m = full.cache.manifest
        print(f"fill   raycache.fill (whole call)         {n / full_s:>12,.0f} rows/s  "
              f"{n / full_s / base:.2f}x the hand loop ({full_s:.1f} s, {m.shard_count} shards, "
              f"{full.pool})")
        print(f"       after start-up                     {full.encode_rows_per_second:>12,.0f}"
              f" rows/s (first shard at {full.first_shard_seconds:.1f} s)")
        if "quarter" not in args.skip:
            print(f"driver peak RSS above its start: N/4 {q_rss.grown_mb:.0f} MB, N "
                  f"{full_rss.grown_mb:.0f} MB: growth {full_rss.peak / q_rss.peak:.2f}x of "
                  f"peak RSS ({q_rss.peak / 2**20:.0f} -> {full_rss.peak / 2**20:.0f} MB)")
            hits = {}
            for label, cfg, shards in (
                    ("N/4", fill_config("quarter", tmp / "quarter", tmp / "store"),
                     q.cache.manifest.shard_count),
                    ("N", fill_config("scale", tmp / "src", tmp / "store"), m.shard_count)):
                start = time.perf_counter()
                assert raycache.fill(cfg).hit
                hits[label] = (time.perf_counter() - start, shards)
            print("hit    " + ", ".join(f"{k}: {s * 1e3:.0f} ms on {c} shards"
                                        for k, (s, c) in hits.items())
                  + f"; ratio {hits['N'][0] / hits['N/4'][0]:.2f}x")
        if "changed" not in args.skip:
            make_source(tmp / "changed", n, changed=0.01)
            inc, inc_s, _ = timed_fill(fill_config("scale-v2", tmp / "changed", tmp / "store"))
            print(f"1% changed: {inc.encoded_rows:,} encoded, {inc.reused_rows:,} reused in "
                  f"{inc_s:.1f} s: {inc_s / full_s:.3f} of the full fill")
        if "train" not in args.skip:
            x, y = read_shards(full.cache)
            plain = plain_training(x, y, args.epochs, args.batch_size)
            print(f"train  plain loop, preloaded tensor       {plain:>12,.0f} rows/s")
            train = {"cache": "scale", "store": {"uri": str(tmp / "store")},
                     "epochs": args.epochs, "batch_size": args.batch_size, "num_workers": 0,
                     "progress": False, "val_fraction": 0.01}
            rates = {}
            for placement in ("cpu", "stream"):
                start = time.perf_counter()
                run = raycache.train({**train, "placement": placement,
                                      "run_name": f"scale-{placement}"})
                wall = time.perf_counter() - start
                epochs = [h["rows_per_s"] for h in run.history]
                rates[placement] = rate = float(np.median(epochs[1:] or epochs))
                compute = sum(h["epoch_seconds"] for h in run.history)
                print(f"train  {placement:<6} placement, epochs 2+      {rate:>12,.0f} rows/s  "
                      f"{rate / plain:.2f}x plain (epoch 1, each shard's sha256 checked: "
                      f"{epochs[0]:,.0f}); run wall {wall:.1f} s for {compute:.1f} s of epochs")
            print(f"train  stream / in-memory (cpu), epochs 2+   "
                  f"{rates['stream'] / rates['cpu']:.2f}x")
            start = time.perf_counter()
            x, y = read_shards(full.cache)
            plain_training(x, y, args.warm_epochs, args.batch_size)
            script = time.perf_counter() - start
            start = time.perf_counter()
            assert raycache.fill(fill_config("scale", tmp / "src", tmp / "store")).hit
            raycache.train({**train, "placement": "cpu", "run_name": "scale-warm",
                            "epochs": args.warm_epochs})
            warm = time.perf_counter() - start
            print(f"warm run (hit + {args.warm_epochs} epochs) {warm:.1f} s vs a plain script "
                  f"reading the shards and training {script:.1f} s: {warm / script:.2f}x")


if __name__ == "__main__":
    main()
