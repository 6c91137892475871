"""A fill's fixed cost: what a fresh driver pays before its first encoder call and first shard,
split by what it is spent on, for this tree against an older one in the same run (not a test).

Each fill runs in a fresh driver process (a new Ray started in it), once per tree and path:
  cpu   N rows of 16 float features (bench/scale.py's source), the cheap torch encoder
        (bench/cheap_encoder.py), raycache's defaults on a local Ray
  gpu   the GPU-shaped proxy: a Ray of 16 logical CPUs and 1 logical GPU on this machine's
        cores (the test switch runs the model on the CPU), short sentences, MiniLM's tokenizer
        and a one-layer 8-wide BERT (bench/feed.py's stand-in)
Printed for each: seconds and CPU-seconds (every process: the driver, Ray's daemons, its
workers) from the start to ray.init's end, and from the fill call to the pool sized, the
pipeline built, the first read, the first encoder call and the first shard; each kind of
worker process's start (created -> its first mark: the interpreter, imports, Ray's
registration), constructor and model load (raycache._core.started's marks); and the processes
started (Ray's daemons and its workers; workers that never ran a task named apart). The ratio
is this tree's over the older tree's.

    python bench/startup.py                     # cpu and gpu, 1M and 100k rows, ~3 minutes
    python bench/startup.py --paths cpu --rows 1000000 --before HEAD~3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

STEPS = ["ray.init", "pool", "built", "read", "encode", "shard"]
"""The driver's steps, in order (the last two: the first encoder call and the first shard)."""


def tree(rev: str, into: Path) -> Path:
    """The package at git revision `rev` ("." for the working tree) in a folder of its own."""
    if rev == ".":
        return ROOT
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "raycache"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def sources(tmp: Path, rows: int, gpu_rows: int, paths: list[str]) -> dict[str, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = {}
    if "cpu" in paths:
        from scale import make_source

        make_source(tmp / "cpu-src", rows)
        out["cpu"] = tmp / "cpu-src"
    if "gpu" in paths:
        from feed import WIDTH, standin
        from fill_speed import short_texts

        standin(tmp / "standin", WIDTH)
        pq.write_table(pa.table({"id": np.arange(gpu_rows), "text": short_texts(gpu_rows)}),
                       tmp / "gpu-src.parquet")
        out["gpu"] = tmp / "gpu-src.parquet"
    return out


def child(path: str, src: Path, tmp: Path, marks: Path) -> dict:
    """One fill in this (fresh) process: its timeline, CPU and processes."""
    from feed import Watch, cpu_at, kind

    store = tmp / "store"
    os.environ["RAYCACHE_START_MARKS"] = str(marks)
    watch = Watch(store, every=0.2)
    watch.start()
    t0 = time.time()
    import ray

    if path == "gpu":
        os.environ["RAYCACHE_TEST_GPU_ON_CPU"] = "1"
        ray.init(num_cpus=16, num_gpus=1, include_dashboard=False, log_to_driver=False)
        cfg = {"name": "gpu", "source": {"path": str(src), "key": "id"}, "reuse": False,
               "pool": {"num_gpus": 1}, "encoders": [{
                   "name": "standin", "kind": "hf-text", "input": "text",
                   "path": str(tmp.parent / "standin"), "precision": "float32"}]}
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
        cfg = {"name": "cpu", "in_process": False,
               "source": {"path": str(src), "key": "id", "labels": ["label"]},
               "encoders": [{"name": "proj", "kind": "torch", "input": "features",
                             "factory": "cheap_encoder:projection"}]}
    import raycache

    call = time.time()
    result = raycache.fill({**cfg, "store": {"uri": str(store)}, "progress": False})
    end = time.time()
    watch.stop.set()
    watch.join()
    lines = [json.loads(line) for f in marks.glob("start-*.jsonl")
             for line in f.read_text().splitlines()]
    me = os.getpid()
    at = {"start": t0, "ray.init": call, "call": call,
          "encode": call + result.startup_seconds, "shard": call + result.first_shard_seconds}
    for name in ("pool", "built", "read"):
        found = [m["t"] for m in lines if m["mark"] == name]
        at[name] = min(found) if found else None
    procs = {pid: p for pid, p in watch.procs.items() if pid != me}
    started = {pid: p for pid, p in procs.items() if p["created"] >= t0 - 1}

    def cpu(when: float) -> float:
        own = time.process_time() if when >= end else None  # the driver's, less the watch's
        driver = (own - watch.own_cpu) if own is not None else cpu_at(watch.procs[me], when)
        return driver + sum(cpu_at(p, when) - 0.0 for p in procs.values()
                            if p["created"] <= when)

    kinds: dict[str, dict] = {}
    for pid, p in started.items():
        mine = sorted((m for m in lines if m["pid"] == pid), key=lambda m: m["t"])
        k = kind(p["title"] or "?")
        if mine and "IDLE" in k:  # a Ray Data task's worker, idle again: named by its marks
            k = "ray::task(" + ",".join(dict.fromkeys(m["mark"].split(":")[0] for m in mine)) + ")"
        row = kinds.setdefault(k, {"n": 0, "idle": 0, "start_s": [], "init_s": [],
                                   "load_s": [], "created": [], "cpu_first_shard": 0.0})
        row["n"] += 1
        row["idle"] += "::" in p["title"] and not mine and "Agent" not in p["title"]
        row["created"].append(p["created"] - call)
        row["cpu_first_shard"] += cpu_at(p, at["shard"])
        if mine:
            row["start_s"].append(mine[0]["t"] - p["created"])
        spans = {m["mark"]: m["t"] for m in mine}
        for name, key in (("chain", "init_s"), ("prepare", "init_s"),
                          ("model actor", "init_s"), ("model load", "load_s")):
            if f"{name}:end" in spans:
                row[key].append(spans[f"{name}:end"] - spans[f"{name}:start"])
    return {"path": path, "rows": result.encoded_rows, "seconds": result.seconds,
            "steps": {k: (v - t0 if k == "ray.init" else v - call) if v else None
                      for k, v in at.items() if k in STEPS},
            "cpu": {k: cpu(v) - (0 if k == "ray.init" else cpu(call))
                    for k, v in at.items() if k in STEPS and v},
            "kinds": kinds, "processes": len(started),
            "workers": sum(1 for p in started.values() if "::" in p["title"]),
            "idle_workers": sum(row["idle"] for row in kinds.values())}


def run_child(code: Path, path: str, src: Path, tmp: Path) -> dict:
    tmp.mkdir(parents=True)
    (tmp / "marks").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(HERE)])}
    out = subprocess.run([sys.executable, __file__, "--child", path, str(src), str(tmp)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode:
        sys.exit(f"the {path} fill failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(s: float | None, c: float | None) -> str:
    return f"{s:6.2f} ({c:6.2f})" if s is not None and c is not None else "-"


def fmt(xs: list[float]) -> str:
    """The first four values, sorted."""
    return "/".join(f"{x:.2f}" for x in sorted(xs)[:4]) or "-"


def show(path: str, runs: dict[str, dict]) -> None:
    before, now = runs["before"], runs["now"]
    print(f"\n{path}: {now['rows']:,} rows; seconds (CPU-seconds, every process), "
          "ray.init from the process start, the rest from the fill call")
    print(f"{'step':<28}{'before':>18}{'now':>18}{'ratio':>8}")
    for step in STEPS:
        b, n = before["steps"].get(step), now["steps"].get(step)
        bc, nc = before["cpu"].get(step), now["cpu"].get(step)
        ratio = f"{n / b:.2f}" if b and n else ""
        print(f"{step:<28}{cell(b, bc):>18}{cell(n, nc):>18}{ratio:>8}")
    for name in ("processes", "workers", "idle_workers"):
        print(f"{name:<28}{before[name]:>18}{now[name]:>18}")
    for label, run in runs.items():
        print(f"  {label}: by kind (n, idle, created at s, start s, constructor s, model load s,"
              " CPU s to the first shard)")
        for k, row in sorted(run["kinds"].items(), key=lambda kv: min(kv[1]["created"])):
            print(f"    {k[:30]:<30} {row['n']:>2} {row['idle']:>2}  {fmt(row['created']):<24}"
                  f" {fmt(row['start_s']):<20} {fmt(row['init_s']):<16} "
                  f"{fmt(row['load_s']):<12} {row['cpu_first_shard']:.2f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, src, tmp = sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
        print(json.dumps(child(path, src, tmp, tmp / "marks")))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="of the cpu path")
    p.add_argument("--gpu-rows", type=int, default=100_000, help="of the gpu path")
    p.add_argument("--paths", nargs="*", default=["cpu", "gpu"], choices=["cpu", "gpu"])
    p.add_argument("--before", default="HEAD", help="the git revision to compare against")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="raycache-startup-") as name:
        tmp = Path(name)
        srcs = sources(tmp, args.rows, args.gpu_rows, args.paths)
        trees = {"before": tree(args.before, tmp / "before"), "now": ROOT}
        figures = {}
        for path in args.paths:
            runs = {label: run_child(code, path, srcs[path], tmp / f"{path}-{label}")
                    for label, code in trees.items()}
            show(path, runs)
            figures[path] = runs
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
