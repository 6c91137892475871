"""Benchmark: what checking shards (size + sha256) costs when a worker loads its share into memory.

On a MiniLM cache of 3 marked copies of the stdlib-docs set (~5k rows, 384-d float32, as in
train_speed.py), one run measures a
worker's in-memory load (load_worker_part, one worker) read unchecked as before (each shard's
columns through a file handle, one after another), and checked (each shard read whole, hashed,
parsed from memory), sequentially and on the thread pool that training uses; and sha256 alone.
The variants take turns in every repeat, so a machine's changing load hits them alike.

    python bench/integrity_cost.py [--store DIR] [--repeats 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import raycache
from raycache._cli.demo_run import MODEL
from raycache._fit.part import expected, pieces, read_piece
from raycache._source.demo_data import stdlib_docs
from raycache._train.data.rows import load_worker_part
from raycache._train.driver.checks import load_config as load_train
from raycache._train.driver.plan import prepare


def interleaved(variants: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each variant, the variants taking turns in every repeat."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def copies(table: pa.Table, times: int) -> pa.Table:
    """`times` copies of the texts, each marked, so every row is a distinct input."""
    return pa.concat_tables(
        pa.table({"id": [f"{k}#{i}" for k in table.column("id").to_pylist()],
                  "text": [f"[{i}] {t}" for t in table.column("text").to_pylist()],
                  "label": table.column("label")}) for i in range(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="a store to fill (or find) the cache in; default: temp")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--copies", type=int, default=3, help="copies of the stdlib-docs texts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or str(Path(tmp, "store"))
        src = Path(tmp, "docs.parquet")
        pq.write_table(copies(stdlib_docs(per_topic=1000), args.copies), src)
        fill = raycache.fill({
            "name": "docs", "source": {"path": str(src), "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": {"uri": store}}, progress=False)
        _, spec = prepare(load_train({"cache": "docs", "store": {"uri": store},
                                             "num_workers": 0, "placement": "cpu",
                                             "progress": False}))
        unchecked = dataclasses.replace(spec, checks=())
        columns = [spec.key, spec.head.label, *spec.head.encoders]
        blobs = [Path(p).read_bytes() for p, _ in spec.shards] if fill.cache.store.is_local \
            else []
        checks = expected(spec.reading)

        def sequential_checked() -> None:
            for path, start, stop in pieces(spec.reading, 0, 1):
                read_piece(spec.reading, path, columns, checks[path]).slice(start, stop - start)

        load_worker_part(spec, 0, 1)  # warm the page cache and pyarrow
        took = interleaved({
            "before": lambda: load_worker_part(unchecked, 0, 1),
            "sequential": sequential_checked,
            "pooled": lambda: load_worker_part(spec, 0, 1),
            "sha": lambda: [hashlib.sha256(b).hexdigest() for b in blobs],
        }, args.repeats)
    before, seq, pooled, sha = took["before"], took["sequential"], took["pooled"], took["sha"]
    m = fill.cache.manifest
    mib = m.bytes / 2**20
    print(f"cache docs: {m.rows} rows, {len(m.shards)} shards, {mib:.1f} MiB, MiniLM 384-d "
          f"float32; median of {args.repeats}")
    print(f"{'in-memory load, unchecked (before)':<44}{before * 1e3:>8.1f} ms  1.00x")
    print(f"{'in-memory load, checked, one by one':<44}{seq * 1e3:>8.1f} ms  "
          f"{seq / before:.2f}x")
    print(f"{'in-memory load, checked, thread pool':<44}{pooled * 1e3:>8.1f} ms  "
          f"{pooled / before:.2f}x")
    if blobs:
        print(f"{'sha256 alone over the shard bytes':<44}{sha * 1e3:>8.1f} ms  "
              f"({mib / sha:.0f} MiB/s, one thread)")


if __name__ == "__main__":
    main()
