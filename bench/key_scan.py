"""The commit's key and label scan, with and without the writers' key summaries (not a test).

Shards of short rows are written by the fill's own writer (raycache._fill.shards.write_stage,
a 384-float embedding a row, a key and an integer label), then the commit's scan
(raycache._fill.keys.scan) is timed four ways over the same shards:

- summaries given: what a fill's commit now does with the summaries its writers returned;
- summaries stored: a resumed fill's, read from the store beside the progress records;
- keys read on the driver: the scan before summaries (fills up to DRIVER_ROWS rows);
- keys read on the cluster: the scan before summaries for larger fills on Ray (the path the
  GPU run's 5M-row fill took), forced here by DRIVER_ROWS = 0 (--cluster).

Also printed: the writer's cost of the summary (hashing the keys, counting labels, writing
it), CPU us a row.

    python bench/key_scan.py --rows 1000000 --cluster
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from raycache._cache.records import ShardRecord  # noqa: E402
from raycache._cache.store import Store  # noqa: E402
from raycache._fill import keys  # noqa: E402
from raycache._fill.shards import STARTED, write_stage  # noqa: E402
from raycache._fill.summary import KeySummary, summarize  # noqa: E402

SHARD = 65_536


def write(store: Store, rows: int, text_keys: bool) -> tuple[list[ShardRecord], dict, float]:
    """The shards, their records and summaries, and the writer's CPU s spent on summaries."""
    rng = np.random.default_rng(0)
    records, summaries, extra = [], {}, 0.0
    for start in range(0, rows, SHARD):
        n = min(SHARD, rows - start)
        ids = np.arange(start, start + n)
        table = pa.table({
            "__block": ["src.parquet"] * n, "__row": ids, "__source": ["src.parquet"] * n,
            "__source_rows": np.full(n, rows), STARTED: np.full(n, time.time()),
            "id": pa.array([f"sentence-{i}" for i in ids]) if text_keys else ids,
            "label": rng.integers(0, 10, n),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(n * 384, np.float32)), 384)})
        out = write_stage(table, store, store.path("c"), "fp", SHARD, key="id",
                          labels=["label"])
        for text, blob in zip(out.column("record").to_pylist(), out.column("keys").to_pylist(),
                              strict=True):
            record = ShardRecord.from_json(json.loads(text))
            records.append(record)
            summaries[record.path] = KeySummary.from_bytes(blob)
        begin = time.process_time()  # the summary's share of the write, measured again
        summarize(table, "id", ["label"], "x", "y").to_bytes()
        extra += time.process_time() - begin
    return records, summaries, extra


def timed(store: Store, records: list[ShardRecord], summaries: dict | None) -> float:
    start = time.perf_counter()
    keys.scan(store, store.path("c"), records, "id", "error", ["label"], "bench", cluster=True,
              summaries=summaries)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--text-keys", action="store_true", help="keys as text, not integers")
    parser.add_argument("--cluster", action="store_true",
                        help="also the scan on Ray Data (starts Ray, 2 CPUs)")
    args = parser.parse_args()
    store = Store(tempfile.mkdtemp(prefix="raycache-keyscan-"))
    records, summaries, extra = write(store, args.rows, args.text_keys)
    figures = {"rows": args.rows, "shards": len(records),
               "writer_summary_cpu_us_per_row": extra / args.rows * 1e6,
               "given_s": timed(store, records, summaries),
               "stored_s": timed(store, records, {}),
               "driver_read_s": timed(store, records, None)}
    if args.cluster:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        keys.DRIVER_ROWS = 0
        figures["cluster_read_s"] = timed(store, records, None)
        ray.shutdown()
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}, indent=1))


if __name__ == "__main__":
    main()
