"""The device anchors (not a test): what the card does with MiniLM over pre-tokenised rows, the
ceiling a fill is measured against, in one process and one run.

Three loops over the same token ids, each timed twice (the second counts), with the GPU's busy
share (kernel time over wall, torch.profiler, a third pass) where there is a GPU:
- `eager`: the bench's older anchor as written (batches of 4,096, a 2D mask the model checks
  with `mask.all()`: one host-device sync a forward, autocast off, weights cast);
- `padded`: the fill's forward sizes (raycache's GPU Batching), weights cast and no autocast, the
  attention mask 4D from host-side lengths (no sync), each batch's pooled rows written at their
  places on the device, one copy back;
- `packed`: the same batches unpadded (raycache._encoders.packed: cumulative lengths, torch's
  varlen attention on a GPU in bfloat16/float16, its exact reference elsewhere).
Over two sentence sets: the bench's short sentences (fill_speed.short_texts, ~15 tokens) and an
uneven one (the sentences of this repository's docs, 5-100+ tokens). `--cpu --rows 2000` runs
the same on the CPU (float32) as a smoke run.

    python bench/gpu/anchor.py --json anchor.json                 # on the GPU machine
    python bench/gpu/anchor.py --cpu --rows 2000 --precision float32
    python bench/gpu/anchor.py --cpu --rows 500 --precision float32 --sets uneven \
        --loops padded,packed
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from fill_speed import MODEL, short_texts  # noqa: E402

from raycache._encoders import packed  # noqa: E402
from raycache._encoders.batching import Batching, by_length, pad_ids  # noqa: E402


def uneven_texts() -> list[str]:
    """The prose sentences of the docs: real text of uneven length."""
    out = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        prose = " ".join(line for line in page.read_text().splitlines()
                         if line and not line.startswith(("#", "|", "`", " ", "-", "<")))
        out += [s for s in re.split(r"(?<=[.:;])\s+", prose) if len(s) > 3]
    return out


def token_ids(texts: list[str], rows: int) -> pa.ListArray:
    """`rows` pre-tokenised rows: the distinct texts tokenised once, repeated."""
    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.hf_text import Tokenize

    ids = Tokenize(EncoderConfig(name="m", kind="hf-text", input="text", path=MODEL))(
        pa.array(texts))
    return ids.take(pa.array(np.arange(rows) % len(texts)))


def model(device: str, dtype, attention: str | None = None):
    import torch
    from transformers import AutoModel

    from raycache._encoders.base import freeze
    from raycache._encoders.hf_text import resolve

    m = freeze(AutoModel.from_pretrained(resolve(MODEL, "minilm"))).to(device, dtype=dtype)
    if attention:
        packed.register()
        m.set_attn_implementation(attention)
    return m, torch


def pinned(t, cuda: bool):
    return t.pin_memory() if cuda else t


def eager(ids: pa.ListArray, device: str, dtype) -> Callable[[], object]:
    """The older anchor as written: sorted rows in batches of 4,096, padded, a 2D mask."""
    m, torch = model(device, dtype)
    rows = sorted(ids.to_pylist(), key=len)
    batches = []
    for i in range(0, len(rows), 4096):
        chunk = rows[i:i + 4096]
        x = np.zeros((len(chunk), len(chunk[-1])), np.int64)
        for j, r in enumerate(chunk):
            x[j, :len(r)] = r
        batches.append(pinned(torch.from_numpy(x), device == "cuda"))

    def run():
        out = []
        for x in batches:
            x = x.to(device, non_blocking=True)
            mask = x != 0
            with torch.inference_mode():
                h = m(input_ids=x, attention_mask=mask).last_hidden_state
                w = mask.unsqueeze(-1).to(h.dtype)
                out.append(torch.nn.functional.normalize(((h * w).sum(1) / w.sum(1)).float(),
                                                         dim=1))
        return torch.cat(out).cpu()
    return run


def lean(ids: pa.ListArray, device: str, dtype, batching: Batching, unpadded: bool
         ) -> Callable[[], object]:
    """The padded (4D host mask) or packed loop at `batching`'s sizes: batches built on the host
    beforehand, then each one's copy in, forward, pooling and placement, and one copy back."""
    m, torch = model(device, dtype, packed.ATTENTION if unpadded else None)
    cuda = device == "cuda"
    lengths = np.diff(ids.offsets.to_numpy())
    varlen = cuda and dtype != torch.float32
    host = []
    for idx in by_length(lengths, batching.max_rows, batching.token_budget, unpadded):
        index = pinned(torch.from_numpy(idx.astype(np.int64)), cuda)
        if unpadded:
            p = packed.pack(ids, idx, 0, "cpu", varlen)
            fields = {f.name: pinned(getattr(p, f.name), cuda) for f in dataclasses.fields(p)
                      if isinstance(getattr(p, f.name), torch.Tensor)}
            host.append((index, dataclasses.replace(p, **fields)))
        else:
            matrix, lens = pad_ids(ids, idx, 0)
            mask = np.arange(matrix.shape[1])[None, :] < lens[:, None]
            host.append((index, (pinned(torch.from_numpy(matrix), cuda),
                                 pinned(torch.from_numpy(mask), cuda),
                                 bool(lens.min() < matrix.shape[1]))))
    n, dim = len(lengths), m.config.hidden_size
    go = lambda t: t.to(device, non_blocking=True)  # noqa: E731

    def forward(batch) -> torch.Tensor:
        if unpadded:
            fields = {f.name: go(getattr(batch, f.name)) for f in dataclasses.fields(batch)
                      if isinstance(getattr(batch, f.name), torch.Tensor)}
            p = dataclasses.replace(batch, **fields)
            h = m(input_ids=p.input_ids, position_ids=p.position_ids,
                  token_type_ids=torch.zeros_like(p.input_ids), packed=p).last_hidden_state[0]
            pooled = packed.SEGMENT_POOLINGS["mean"](h.float(), p)
        else:
            x, mask, uneven = go(batch[0]), go(batch[1]), batch[2]
            h = m(input_ids=x, attention_mask=mask[:, None, None, :] if uneven else None
                  ).last_hidden_state.float()
            w = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * w).sum(1) / w.sum(1)
        return torch.nn.functional.normalize(pooled, dim=1)

    def run():
        with torch.inference_mode():
            out = torch.empty((n, dim), device=device)
            for index, batch in host:
                out.index_copy_(0, go(index), forward(batch))
            back = torch.empty(out.shape, pin_memory=cuda)
            return back.copy_(out)
    return run


def measured(run: Callable[[], object], rows: int, cuda: bool) -> dict:
    """Rows/s of the second of two timed runs, and on a GPU the kernel time over the wall of a
    third, profiled run."""
    import torch

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    seconds = []
    for _ in range(2):
        sync()
        start = time.perf_counter()
        run()
        sync()
        seconds.append(time.perf_counter() - start)
    out = {"rows_per_s": rows / seconds[1], "first_s": round(seconds[0], 3),
           "second_s": round(seconds[1], 3)}
    if cuda:
        out["gpu_busy"] = busy(run)
    return out


def busy(run: Callable[[], object]) -> float | str:
    """Kernel time over wall time of one run, from torch.profiler's CUDA events."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        kernels = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
                      for e in prof.key_averages())
        return round(kernels / 1e6 / wall, 3)
    except Exception as exc:  # a profiler that does not run here: say so, measure the rest
        return f"not measured: {type(exc).__name__}: {exc}"[:200]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (a smoke run)")
    parser.add_argument("--loops", default="eager,padded,packed")
    parser.add_argument("--sets", default="bench,uneven")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    device, dtype = ("cuda" if cuda else "cpu"), getattr(torch, args.precision)
    batching = Batching.on(gpu=cuda)
    report: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                    "rows": args.rows, "precision": args.precision,
                    "batching": dataclasses.asdict(batching), "sets": {}}
    sets = {"bench": lambda: short_texts(50_000), "uneven": uneven_texts}
    for name in args.sets.split(","):
        texts = sets[name]()
        ids = token_ids(texts, args.rows)
        tokens = np.diff(ids.offsets.to_numpy())
        figures: dict = {"tokens_mean": round(float(tokens.mean()), 1)}
        for loop in args.loops.split(","):
            run = (eager(ids, device, dtype) if loop == "eager"
                   else lean(ids, device, dtype, batching, loop == "packed"))
            figures[loop] = measured(run, args.rows, cuda)
            print(name, loop, json.dumps(figures[loop]), flush=True)
        if "padded" in figures and "packed" in figures:
            figures["packed_over_padded"] = round(
                figures["packed"]["rows_per_s"] / figures["padded"]["rows_per_s"], 3)
        if "eager" in figures and "padded" in figures:
            figures["padded_over_eager"] = round(
                figures["padded"]["rows_per_s"] / figures["eager"]["rows_per_s"], 3)
        ordered = np.sort(tokens)
        chunks = [ordered[i:i + 4096] for i in range(0, len(ordered), 4096)]
        figures["padding_share_at_4096"] = round(
            1 - tokens.sum() / sum(len(c) * int(c.max()) for c in chunks), 4)
        report["sets"][name] = figures
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
