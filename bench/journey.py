"""A first user's journey with raycache's defaults against the same work by hand (not a test).

Every side runs as a fresh process, timed whole (imports included), as a user's script would:
  journey     fill N rows (bench/cheap_encoder.py, 8 Parquet files) and train a linear head for 2
              epochs with raycache's defaults, against a hand-written script doing the same work:
              read, encode, packed Parquet write, reload, a plain training loop with the same
              80/20 split and batch size; with no cluster, then with a running one
              (`ray start --head`, RAY_ADDRESS set, as under `ray job submit`)
  changed     with the cluster running: the same source with 1% of its rows changed, filled as a
              new version of the N-row cache (the fill call's seconds, and its encoded rows)
  first       with the cluster running: fresh drivers fill 100k rows of the cheap encoder, or
              600 short texts with the shipped MiniLM, each twice (new stores), forced onto Ray
              (in_process: false); the seconds from the end of each fill's plan to its first
              encoder call
  warm        `raycache train` from the shell on a ~5k-row cache already filled: 10 epochs of a
              linear head, the whole process
  minilm      an in-process fill of short texts with the shipped MiniLM (rows/s after start-up)
              against sentence-transformers' own `encode` on the same texts in the same process

    python bench/journey.py                    # 1,000,000 rows
    python bench/journey.py --rows 200000 --skip cluster
    python bench/journey.py --skip local cluster warm minilm    # the first encoder call only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAY = str(Path(sys.executable).with_name("ray"))

FILL_AND_TRAIN = """
import json, sys, time
start = time.perf_counter()
import raycache
from scale import fill_config
src, store = sys.argv[1], sys.argv[2]
fill = raycache.fill(fill_config("journey", src, store))
filled = time.perf_counter()
run = raycache.train({"cache": "journey", "store": {"uri": store}, "label": "label",
                      "head": "linear", "loop": {"epochs": 2}, "progress": False})
print(json.dumps({"fill_s": filled - start, "fill_call_s": fill.seconds,
                  "encoded": fill.encoded_rows,
                  "pool": fill.pool, "train_s": time.perf_counter() - filled,
                  "startup": fill.startup_seconds,
                  "val_acc": run.history[-1].get("val_acc"), "summary": run.summary()}))
"""

HAND = """
import json, sys, time
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq, torch
from cheap_encoder import projection
src, out = Path(sys.argv[1]), Path(sys.argv[2])
net = projection().eval()
out.mkdir(parents=True)
schema = pa.schema([("id", pa.int64()), ("label", pa.int64()),
                    ("proj", pa.list_(pa.float32(), 384))])
with torch.inference_mode():
    for path in sorted(src.glob("*.parquet")):
        with pq.ParquetWriter(out / path.name, schema, compression="none") as w:
            for batch in pq.ParquetFile(path).iter_batches(65536):
                col = batch.column("features")
                x = col.flatten().to_numpy().reshape(len(col), 16)
                emb = net(torch.from_numpy(x)).numpy()
                proj = pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 384)
                w.write_table(pa.table({"id": batch.column("id"), "label": batch.column("label"),
                                        "proj": proj}, schema=schema))
t = pq.read_table(out, columns=["id", "label", "proj"])
col = t.column("proj").combine_chunks()
x = torch.from_numpy(col.flatten().to_numpy().reshape(len(col), -1))
y = torch.from_numpy(t.column("label").to_numpy())
val = torch.from_numpy(np.random.default_rng(0).random(len(t)) < 0.2)
xt, yt, xv, yv = x[~val], y[~val], x[val], y[val]
head = torch.nn.Linear(384, 10)
opt = torch.optim.AdamW(head.parameters(), 1e-3)
torch.manual_seed(0)
for epoch in range(2):
    for idx in torch.randperm(len(xt)).split(256):
        loss = torch.nn.functional.cross_entropy(head(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (head(xv).argmax(1) == yv).float().mean().item()
torch.save(head.state_dict(), out / "head.pt")
print(json.dumps({"val_acc": acc}))
"""

CHANGED = """
import json, sys, time
import raycache
from scale import fill_config
start = time.perf_counter()
fill = raycache.fill(fill_config("journey", sys.argv[1], sys.argv[2]))
print(json.dumps({"fill_call_s": time.perf_counter() - start, "encoded": fill.encoded_rows,
                  "shared": fill.shared_rows, "pool": fill.pool, "startup": fill.startup_seconds}))
"""

MINILM = """
import json, sys, time
import numpy as np, pyarrow as pa, pyarrow.parquet as pq, torch
from fill_speed import MODEL, short_texts
import raycache
from raycache._encoders.hf_text import resolve
from sentence_transformers import SentenceTransformer
n, tmp = int(sys.argv[1]), sys.argv[2]
texts = short_texts(n)
pq.write_table(pa.table({"id": np.arange(n), "text": texts, "label": np.arange(n) % 7}),
               tmp + "/texts.parquet")
threads = torch.get_num_threads()
st = SentenceTransformer(str(resolve(MODEL, "minilm")), device="cpu")
st.encode(texts[:64])
start = time.perf_counter()
st.encode(texts, batch_size=32)
st_rate = n / (time.perf_counter() - start)
torch.set_num_threads(threads)
fill = raycache.fill({"name": "minilm", "source": {"path": tmp + "/texts.parquet", "key": "id",
                                                   "labels": ["label"]},
                      "store": {"uri": tmp + "/store"}, "progress": False,
                      "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text",
                                    "path": MODEL}]})
print(json.dumps({"st": st_rate, "fill": fill.encode_rows_per_second, "whole": fill.rows_per_second,
                  "pool": fill.pool, "threads": threads}))
"""

FIRST = """
import json, sys, time
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
import raycache
from raycache._fill import run
from fill_speed import MODEL, short_texts
from scale import fill_config
kind, src, tmp = sys.argv[1:]
if kind == "minilm":
    src = tmp + "/first-texts.parquet"
    pq.write_table(pa.table({"id": np.arange(600), "text": short_texts(600),
                             "label": np.arange(600) % 7}), src)
cfg = fill_config("first", src, "")
if kind == "minilm":
    cfg["encoders"] = [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}]
planned, plan = [], run.plan
def timed(cfg):  # the end of the plan: encoder digests, the source listed
    p = plan(cfg)
    planned.append(time.time())
    return p
run.plan = timed
out = []
for i in range(2):
    start = time.time()
    fill = raycache.fill({**cfg, "store": {"uri": f"{tmp}/first-{kind}-{time.time()}"},
                          "in_process": False})
    out.append(start + fill.startup_seconds - planned[-1])
print(json.dumps({"after_plan": out, "pool": fill.pool}))
"""


def python(script: str, *args: str, env: dict[str, str] | None = None) -> tuple[float, dict]:
    """A fresh process running `script`: its wall seconds and the JSON it printed last."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode:
        sys.exit(f"a side failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return wall, json.loads(out.stdout.strip().splitlines()[-1])


TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
"""The cluster's token (Ray's default token auth), given to the drivers as a job's would be."""


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | TOKEN
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def journey(tmp: Path, tag: str, env: dict[str, str]) -> dict:
    """One run of each side on the same source; prints them and the ratio."""
    hand_s, hand = python(HAND, str(tmp / "src"), str(tmp / f"hand-{tag}"), env=environ())
    ours_s, ours = python(FILL_AND_TRAIN, str(tmp / "src"), str(tmp / f"store-{tag}"), env=env)
    print(f"journey, {tag}: raycache {ours_s:5.1f} s (fill {ours['fill_s']:.1f} s, first "
          f"encoder call at {ours['startup']:.2f} s, on "
          f"{ours['pool']}; train {ours['train_s']:.1f} s, val_acc {ours['val_acc']:.3f}) | "
          f"by hand {hand_s:5.1f} s (val_acc {hand['val_acc']:.3f}) | "
          f"ratio {ours_s / hand_s:.2f}x (target <= 1.0x)")
    print(f"    {ours['summary'].splitlines()[0]}")
    return ours


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--minilm-rows", type=int, default=3000)
    p.add_argument("--skip", nargs="*", default=[],
                   choices=["local", "cluster", "first", "warm", "minilm"])
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    from scale import make_source

    import raycache
    print(f"rows {args.rows:,}; {os.cpu_count()} CPUs; raycache from {raycache.__file__}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_source(tmp / "src", args.rows)
        if "local" not in args.skip:
            journey(tmp, "no cluster", environ())
        if "cluster" not in args.skip or "first" not in args.skip:
            with running_cluster() as env:
                if "first" not in args.skip:
                    first(tmp, env)
                if "cluster" not in args.skip:
                    journey(tmp, "running cluster", env)
                    changed(tmp, args.rows, env)
        if "minilm" not in args.skip or "warm" not in args.skip:
            wall, out = python(MINILM, str(args.minilm_rows), str(tmp), env=environ())
            if "minilm" not in args.skip:
                print(f"minilm, {args.minilm_rows:,} short texts: raycache in-process fill "
                      f"{out['fill']:.0f} rows/s ({out['pool']}) | sentence-transformers encode "
                      f"{out['st']:.0f} rows/s | ratio {out['fill'] / out['st']:.2f}x "
                      "(target >= 1.4x)")
        if "warm" not in args.skip:
            warm(tmp)
            phases(tmp)


@contextlib.contextmanager
def running_cluster() -> Iterator[dict[str, str]]:
    """A one-node cluster (`ray start --head`, 2 CPUs, token auth), the drivers' environment
    naming it; stopped at the end, its own processes only (`ray stop` would stop every Ray on
    the machine, other users' too)."""
    temp = tempfile.mkdtemp(prefix="rcj", dir="/tmp")  # short: Ray's socket paths have a limit
    with socket.socket() as free:  # not Ray's default port: a cluster the user runs is left alone
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    subprocess.run([RAY, "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                    "--disable-usage-stats", f"--temp-dir={temp}"],
                   env=environ(), check=True, capture_output=True)
    try:
        yield environ(RAY_ADDRESS=f"127.0.0.1:{port}")
    finally:
        import psutil

        ours = [p for p in psutil.process_iter(["cmdline"])  # the client server: by its port
                if temp in (line := " ".join(p.info["cmdline"] or [])) or f":{port} " in line
                or line.endswith(f":{port}")]
        ours += [c for p in ours for c in p.children(recursive=True)]  # the raylet's workers
        for p in ours:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(ours, timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


def changed(tmp: Path, rows: int, env: dict[str, str]) -> None:
    """The 1%-changed source filled as a new version of the N-row cache."""
    from scale import make_source

    make_source(tmp / "changed", rows, changed=0.01)
    for f in (tmp / "changed").iterdir():  # the user's files edited in place
        os.replace(f, tmp / "src" / f.name)
    wall, out = python(CHANGED, str(tmp / "src"), str(tmp / "store-running cluster"), env=env)
    print(f"changed 1%, running cluster: fill call {out['fill_call_s']:.2f} s "
          f"(target <= 1.5 s; first encoder call at {out['startup']:.2f} s), process "
          f"{wall:.1f} s; encoded {out['encoded']:,}, "
          f"shared {out['shared']:,}; {out['pool']}")


def first(tmp: Path, env: dict[str, str]) -> None:
    """Seconds from the end of a fill's plan to its first encoder call, on the running cluster:
    a fresh driver's first fill and its second (a new store, the same encoder), two drivers
    for each encoder, one after the other."""
    from scale import make_source

    make_source(tmp / "first-src", 100_000)
    for kind in ("cheap", "minilm", "cheap", "minilm"):
        load = os.getloadavg()[0]
        _, out = python(FIRST, kind, str(tmp / "first-src"), str(tmp), env=env)
        first_s, second_s = out["after_plan"]
        print(f"first encoder call after the plan, running cluster, {kind}: first fill "
              f"{first_s:.2f} s, second fill {second_s:.2f} s (a fresh driver; {out['pool']}; "
              f"load {load:.1f})")

PHASES = """
import cProfile, json, pstats, sys, time
start = time.perf_counter()
import raycache
imported = time.perf_counter() - start
import torch
torch_s = time.perf_counter() - start - imported
profile = cProfile.Profile()
profile.enable()
raycache.train({"cache": "minilm", "store": {"uri": sys.argv[1]}, "head": "linear",
                "label": "label", "loop": {"epochs": 10, "seed": 3}, "progress": False})
profile.disable()
total = time.perf_counter() - start
stats = pstats.Stats(profile).stats
def cum(module, name):
    return sum(v[3] for (f, _, n), v in stats.items() if f.endswith(module) and n == name)
parts = {"import raycache": imported, "import torch": torch_s,
    "config, cache hit, run plan": cum("train/driver/plan.py", "prepare"),
    "load and check the share": cum("train/worker/assemble.py", "data_sources"),
    "build head, optimizer": cum("train/worker/assemble.py", "build_heads"),
    "10 epochs: training steps": cum("train/worker/epoch.py", "train_epoch"),
    "10 epochs: validation": cum("train/worker/epoch.py", "evaluate"),
    "checkpoints (each epoch's best, the last)": cum("train/worker/state.py", "save"),
    "TensorBoard, curves.png, metrics": cum("train/metrics_log.py", "write_artifacts")}
parts["the rest: the loop's modules, store checks, run records"] = total - sum(parts.values())
print(json.dumps({"whole": total, **parts}))
"""


def phases(tmp: Path) -> None:
    """Where a warm in-process run's seconds go (cumulative profile times, one fresh process)."""
    _, out = python(PHASES, str(tmp / "store"), env=environ())
    print("warm run, line by line (cProfile, fresh process):")
    for name, seconds in out.items():
        print(f"    {name:<50} {seconds:6.2f} s")


def warm(tmp: Path) -> None:
    """`raycache train` as a fresh process on the committed MiniLM cache, the second of two."""
    config = tmp / "warm.yaml"
    config.write_text(json.dumps({"cache": "minilm", "store": {"uri": str(tmp / "store")},
                                  "head": "linear", "label": "label", "loop": {"epochs": 10}}))
    cmd = [str(Path(sys.executable).with_name("raycache")), "train", "--config", str(config)]
    for seed in (1, 2):  # the first warms the page cache; another seed: a new run each time
        start = time.perf_counter()
        out = subprocess.run([*cmd, "--set", f"loop.seed={seed}"], capture_output=True,
                             text=True, env=environ())
        wall = time.perf_counter() - start
        if out.returncode:
            sys.exit(f"raycache train failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    print(f"warm run, `raycache train` (hit + 10 epochs of a linear head), whole process: "
          f"{wall:.2f} s (target <= 3 s)\n    {out.stdout.strip().splitlines()[-1][:200]}")


if __name__ == "__main__":
    main()
