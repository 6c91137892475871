"""A GPU fill against what the GPU can do, in one run (not a test): MiniLM over short sentences
in the compute dtype, `raycache.fill` on the GPU pool, against the pre-tokenised forward on the
same card (the anchor: rows tokenised beforehand, sorted by length, batches of 4096, weights in
the compute dtype; only the forward and pooling timed).

The fill's rate is taken between the second and the last-but-one shard written (start-up and
drain left out), with the GPU's busy share sampled by nvidia-smi over the same span, and the
time from the call to the first shard. Without CUDA it runs the same shape on a logical GPU
with the model on the CPU (a smoke run: figures of no meaning, the JSON still written).

    python bench/gpu/fill.py --rows 5000000 --json fill.json
    python bench/gpu/fill.py --rows 5000000 --num-gpus 0.5      # two model actors on the GPU
"""

from __future__ import annotations

import argparse
import json
import os
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
from feed import Watch, kind  # noqa: E402
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


def fill(source: Path, store: Path, rows: int, precision: str, num_gpus: float) -> dict:
    """One fill on the GPU pool: its summary figures, and its shards' write times."""
    import raycache

    watch = Watch(store)  # each Ray process's CPU over the fill: which stage is saturated
    watch.start()
    start = time.time()
    result = raycache.fill({
        "name": "gpu-fill", "progress": False, "source": {"path": str(source), "key": "id"},
        "store": {"uri": str(store)}, "rows_per_shard": 65536, "reuse": False,
        "pool": {"num_gpus": num_gpus},
        "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL,
                      "precision": precision}],
    })
    end = time.time()
    watch.stop.set()
    watch.join()
    assert result.encoded_rows == rows, result.summary()
    shards = sorted(store.rglob("shards/*.parquet"), key=lambda p: p.stat().st_mtime)
    busy: dict[str, list[float]] = {}
    for p in watch.procs.values():
        if p["cpu"] - p["cpu0"] > 0.5:
            busy.setdefault(kind(p["title"]), []).append((p["cpu"] - p["cpu0"]) / (end - start))
    return {"start": start, "seconds": result.seconds, "pool": result.pool,
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
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    import torch

    cuda = torch.cuda.is_available()
    if not cuda:  # a smoke run of the same shape: a logical GPU, the model on the CPU
        from raycache._compute.pool import GPU_ON_CPU

        os.environ[GPU_ON_CPU] = "1"
        args.precision = "float32"
    device = "cuda" if cuda else "cpu"
    distinct = short_texts(min(args.rows, 200_000))  # then repeated: each row still encoded
    texts = (distinct * -(-args.rows // len(distinct)))[:args.rows]  # (reuse is off)
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                 "cores": os.cpu_count(), "rows": args.rows, "precision": args.precision}
    out["anchor_rows_per_s"] = anchor(texts[:min(len(texts), 1_000_000)], device,
                                      args.precision)
    print(f"anchor (pre-tokenised {args.precision} forward): {out['anchor_rows_per_s']:,.0f} "
          "rows/s", flush=True)
    ray.init(num_gpus=None if cuda else 1, include_dashboard=False, log_to_driver=False,
             **({} if cuda else {"num_cpus": 4}))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.parquet"
        pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts}), src,
                       row_group_size=1 << 20)
        out["fills"] = []
        for gpus in args.num_gpus:
            busy = Busy()
            if cuda:
                busy.start()
            got = fill(src, Path(tmp) / f"store-{gpus:g}", args.rows, args.precision, gpus)
            busy.halt.set()
            times = [t for t, _ in got["shards"]]
            middle = got["shards"][1:-1]
            span = (times[-2] - times[0]) if len(times) > 2 else None
            rate = sum(n for _, n in middle) / span if span else None
            figures = {
                "num_gpus": gpus, "pool": got["pool"], "shards": len(times),
                "rows_per_s_steady": rate,
                "of_anchor": rate / out["anchor_rows_per_s"] if rate else None,
                "rows_per_s_whole": args.rows / got["seconds"],
                "first_shard_s": times[0] - got["start"] if times else None,
                "gpu_busy_pct": busy.mean(times[0], times[-2]) if span else None,
            }
            figures["cores_busy"] = got["cores_busy"]
            out["fills"].append(figures)
            print(json.dumps(figures), flush=True)
            print(got["summary"], flush=True)
    ray.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
