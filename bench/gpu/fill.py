"""A GPU fill against what the GPU can do, in one run (not a test): MiniLM over short sentences
in the compute dtype, `raycache.fill` on the GPU pool, against the pre-tokenised forward on the
same card (the anchor: rows tokenised beforehand, sorted by length, batches of 4096, weights in
the compute dtype; only the forward and pooling timed).

One fill per model-stage shape of `--shapes` (compute.model_actor.SHAPES; default "apart", the
shape before: a serial model actor, its vector blocks through the object store to write actors;
and "overlap": the writes in the model actor, two calls at once) and GPUs per actor. Each fill's
rate is taken between the second and the last-but-one shard written (start-up and drain left
out), with the GPU's busy share sampled by nvidia-smi over the same span, the time from the call
to the first shard, and the model actor's marks of each block (enter, device: its lock held,
launched: the forward's last kernel queued where it marks it, copied: the output on the host,
exit: written), from which the hop's share is printed: the device lock free between blocks (the
GPU idle as the actor sees it) and each step's share of a block. Also `df /dev/shm` and where
Ray put its object store (the raylet's --plasma_directory). Without CUDA, or with `--cpu`, it
runs the same shapes on a logical GPU with bench/feed.py's sleeping stand-in as the model (a
smoke run of the kit: figures of no meaning, the JSON still written).

    python bench/gpu/fill.py --rows 3000000 --json fill.json
    python bench/gpu/fill.py --rows 5000000 --shapes overlap --num-gpus 0.5   # two actors a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from feed import STANDIN_US, Watch, block_times, gone, kind, model_figures, sleeping_forward  # noqa: E402
from fill_speed import MODEL, short_texts  # noqa: E402


class Busy(threading.Thread):
    """nvidia-smi's GPU utilisation, (time, %) every 0.2 s, until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True)
            if out.returncode == 0:
                self.samples.append((time.time(), float(out.stdout.split()[0])))

    def mean(self, start: float, end: float) -> float | None:
        inside = [u for t, u in self.samples if start <= t <= end]
        return float(np.mean(inside)) if inside else None


def anchor(texts: list[str], device: str, precision: str, batch: int = 4096) -> float:
    """Rows/s of the pre-tokenised forward: tokenised, sorted and padded beforehand (not
    timed), then each batch's copy to the device, forward, pooling, and one copy back."""
    import torch
    from transformers import AutoModel

    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.hf_text import Tokenize, resolve

    dtype = getattr(torch, precision)
    model = AutoModel.from_pretrained(resolve(MODEL, "minilm")).eval().to(device, dtype=dtype)
    ids = Tokenize(EncoderConfig(name="minilm", kind="hf-text", input="text",
                                 path=MODEL))(pa.array(texts))
    rows = sorted(ids.to_pylist(), key=len)
    batches = []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        x = np.zeros((len(chunk), len(chunk[-1])), np.int64)
        for j, r in enumerate(chunk):
            x[j, :len(r)] = r
        t = torch.from_numpy(x)
        batches.append(t.pin_memory() if device == "cuda" else t)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device, non_blocking=True)
        mask = x != 0
        with torch.inference_mode():
            h = model(input_ids=x, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            return torch.nn.functional.normalize(((h * m).sum(1) / m.sum(1)).float(), dim=1)

    run(batches[0])
    sync()
    start = time.perf_counter()
    out = [run(x) for x in batches]
    torch.cat(out).cpu()
    sync()
    return len(texts) / (time.perf_counter() - start)


def object_store() -> dict:
    """`df /dev/shm`, and where the raylet of this machine put Ray's object store and how big."""
    import psutil

    df = subprocess.run(["df", "-h", "/dev/shm"], capture_output=True, text=True).stdout.strip()
    out: dict = {"df_dev_shm": df}
    for p in psutil.process_iter(["name", "cmdline"]):
        if "raylet" in (p.info["name"] or ""):
            for arg in p.info["cmdline"] or []:
                for flag in ("plasma_directory", "fallback_directory", "object_store_memory"):
                    if arg.startswith(f"--{flag}="):
                        out[flag] = arg.split("=", 1)[1]
    return out


def hops(blocks: list[dict], start: float) -> dict:
    """The model actor's blocks: the device lock free between one block's output on the host
    and the next block's turn (the GPU idle as the actor sees it) over the span, each step's
    mean seconds a block, and every block's marks relative to the fill's call."""
    if not blocks:
        return {}
    turns = sorted(blocks, key=lambda b: b["device"])
    span = turns[-1]["copied"] - turns[0]["device"]
    idle = sum(max(0.0, b["device"] - a["copied"]) for a, b in zip(turns, turns[1:],
                                                                   strict=False))

    def mean(a: str, b: str) -> float | None:
        got = [x[b] - x[a] for x in blocks if a in x and b in x]
        return round(sum(got) / len(got), 4) if got else None

    return {"device_idle_share": idle / span if span > 0 else None,
            "wait_for_device_s": mean("enter", "device"), "to_launched_s": mean("device",
                                                                                "launched"),
            "launched_to_copied_s": mean("launched", "copied"),
            "on_device_s": mean("device", "copied"), "write_s": mean("copied", "exit"),
            "marks": [{k: round(v - start, 3) if k in ("enter", "device", "launched", "copied",
                                                      "exit") else v for k, v in b.items()}
                      for b in blocks]}


def fill(source: Path, store: Path, rows: int, precision: str, num_gpus: float,
         times: Path, block: int = 65536, last: bool = False) -> dict:
    """One fill on the GPU pool: its summary figures, its shards' write times and its model
    actor's block marks; unless it is the `last`, once its stage processes are gone."""
    import raycache

    watch = Watch(store)  # each Ray process's CPU over the fill: which stage is saturated
    watch.start()
    start = time.time()
    result = raycache.fill({
        "name": "gpu-fill", "progress": False, "source": {"path": str(source), "key": "id"},
        "store": {"uri": str(store)}, "rows_per_shard": block, "reuse": False,
        "pool": {"num_gpus": num_gpus, "block_rows": block},
        "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL,
                      "precision": precision}],
    })
    end = time.time()
    watch.stop.set()
    watch.join()
    if not last:  # this fill's actors, before the next fill starts its own
        gone(watch)
    assert result.encoded_rows == rows, result.summary()
    shards = sorted(store.rglob("shards/*.parquet"), key=lambda p: p.stat().st_mtime)
    busy: dict[str, list[float]] = {}
    for p in watch.procs.values():
        if p["cpu"] - p["cpu0"] > 0.5:
            busy.setdefault(kind(p["title"]), []).append((p["cpu"] - p["cpu0"]) / (end - start))
    blocks = block_times(times, start, end)
    return {"start": start, "seconds": result.seconds, "pool": result.pool,
            "model": {k: v for k, v in model_figures(blocks).items() if "gpu" not in k},
            "hops": hops(blocks, start),
            "cores_busy": {k: {"processes": len(v), "cores": round(sum(v), 2),
                               "busiest": round(max(v), 2)} for k, v in busy.items()},
            "summary": result.summary(),
            "shards": [(p.stat().st_mtime, pq.ParquetFile(p).metadata.num_rows) for p in shards]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--num-gpus", type=float, nargs="+", default=[1.0],
                        help="GPUs per model actor; one fill each (0.5: two actors a GPU)")
    parser.add_argument("--shapes", nargs="+", default=["apart", "overlap"],
                        help="model-stage shapes (compute.model_actor.SHAPES); one fill each")
    parser.add_argument("--block-rows", type=int, default=65536,
                        help="rows a block, a model call and a shard")
    parser.add_argument("--cpu", action="store_true",
                        help="the smoke run on the CPU (a logical GPU) even where CUDA is")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    import torch

    from raycache._compute import model_actor

    cuda = torch.cuda.is_available() and not args.cpu
    times = Path(tempfile.mkdtemp(prefix="raycache-blocks-"))
    os.environ[model_actor.BLOCK_TIMES] = str(times)  # the model actors' marks (Ray inherits)
    if not cuda:  # a smoke run of the same shape: a logical GPU, the model on the CPU
        from raycache._compute.pool import GPU_ON_CPU

        os.environ[GPU_ON_CPU] = "1"
        os.environ[STANDIN_US] = "100"  # and bench/feed.py's sleeping stand-in as the model
        os.environ["PYTHONPATH"] = os.pathsep.join(  # (Ray's workers import it from there)
            [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
        args.precision = "float32"
    device = "cuda" if cuda else "cpu"
    distinct = short_texts(min(args.rows, 200_000))  # then repeated: each row still encoded
    texts = (distinct * -(-args.rows // len(distinct)))[:args.rows]  # (reuse is off)
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                 "cores": os.cpu_count(), "rows": args.rows, "precision": args.precision}
    out["anchor_rows_per_s"] = anchor(texts[:min(len(texts), 1_000_000 if cuda else 32)],
                                      device, args.precision)
    print(f"anchor (pre-tokenised {args.precision} forward): {out['anchor_rows_per_s']:,.0f} "
          "rows/s", flush=True)
    ray.init(num_gpus=None if cuda else 1, include_dashboard=False, log_to_driver=False,
             **({} if cuda else {"num_cpus": 4,
                                 "runtime_env": {"worker_process_setup_hook": sleeping_forward}}))
    out["object_store"] = object_store()
    print(json.dumps(out["object_store"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.parquet"
        pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts}), src,
                       row_group_size=1 << 20)
        out["fills"] = []
        runs = [(s, g) for s in args.shapes for g in args.num_gpus]
        for i, (shape, gpus) in enumerate(runs):
            model_actor.SHAPE = shape  # the pipeline is built on this driver
            busy = Busy()
            if cuda:
                busy.start()
            got = fill(src, Path(tmp) / f"store-{shape}-{gpus:g}", args.rows, args.precision,
                       gpus, times, args.block_rows, last=i == len(runs) - 1)
            busy.halt.set()
            times_ = [t for t, _ in got["shards"]]
            middle = got["shards"][1:-1]
            span = (times_[-2] - times_[0]) if len(times_) > 2 else None
            rate = sum(n for _, n in middle) / span if span else None
            figures = {
                "shape": shape, "num_gpus": gpus, "pool": got["pool"], "shards": len(times_),
                "rows_per_s_steady": rate,
                "of_anchor": rate / out["anchor_rows_per_s"] if rate else None,
                "rows_per_s_whole": args.rows / got["seconds"],
                "first_shard_s": times_[0] - got["start"] if times_ else None,
                "gpu_busy_pct": busy.mean(times_[0], times_[-2]) if span else None,
                **got["model"],
                **{k: v for k, v in got["hops"].items() if k != "marks"},
            }
            figures["cores_busy"] = got["cores_busy"]
            print(json.dumps(figures), flush=True)
            print(got["summary"], flush=True)
            out["fills"].append({**figures, "marks": got["hops"].get("marks", [])})
    ray.shutdown()
    shutil.rmtree(times, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
