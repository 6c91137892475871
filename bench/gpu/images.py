"""An image fill against its model's raw forward, in one process (not a test): a ViT-B/16-sized
model (transformers' ViTConfig defaults, 224x224, random weights: no hub is reachable) over
synthetic JPEGs, `raycache.fill` on the GPU pool against the raw forward on the same card.

The raw forward: the images decoded and resized beforehand (not timed) and held on the device as
uint8; each batch rescaled and normalised there, in bfloat16 weights, pooled, no sync until the
end; timed twice, the second counts. The fill decodes and resizes in the CPU prepare pool and
sends uint8 pixels to the model actor; its rate is taken between the second and the last-but-one
shard written, with the GPU's busy share over the same span. Also printed: the bytes a row of
prepared pixels crosses the object store with, uint8 now and float32 before. `--cpu`: a tiny
ViT on the CPU, a logical GPU (a smoke run: figures of no meaning, the JSON still written).

    python bench/gpu/images.py --rows 60000 --json images.json     # on a GPU: ~2 minutes
    python bench/gpu/images.py --cpu --rows 64
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fill import Busy  # noqa: E402

TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
"""The --cpu smoke's ViT: 224x224 in 16x16 patches as ViT-B/16, far fewer weights."""


def vit_folder(folder: Path, tiny: bool) -> Path:
    """A ViT-B/16-sized model (or TINY) with random weights (seed 0) and its image processor
    (224x224, mean and std 0.5, as google/vit-base-patch16-224's), saved in `folder`."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(0)
    ViTModel(ViTConfig(**(TINY if tiny else {}))).save_pretrained(folder)
    ViTImageProcessor(size={"height": 224, "width": 224}).save_pretrained(folder)
    return folder


def jpegs(n: int, seed: int = 0) -> list[bytes]:
    """`n` distinct 320x240 JPEGs (quality 90): smooth colour fields with noise, the size of a
    web photo's thumbnail, to decode and resize as real ones are."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:240, 0:320].astype(np.float32)
    out = []
    for _ in range(n):
        a, b, c = rng.uniform(0.005, 0.05, 3)
        field = np.stack([np.sin(a * x + b * y), np.cos(b * x - c * y), np.sin(c * (x + y))], -1)
        pixels = (field * 100 + 128 + rng.normal(0, 12, field.shape)).clip(0, 255)
        buf = io.BytesIO()
        Image.fromarray(pixels.astype(np.uint8)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def hop_bytes(folder: Path, images: list[bytes]) -> dict[str, float]:
    """Bytes a row of the block the fill's prepare stage returns (what crosses the object store
    to the model actor: pixels, the input's hash, the key, the row's bookkeeping), in Arrow:
    now (uint8 pixels) and with the processor's float32 pixels, which it sent before."""
    from PIL import Image

    from raycache._compute.prepare import PrepareActor, prepared
    from raycache._encoders.config import EncoderConfig
    from raycache._encoders.pixels import nested
    from raycache._fill.stages import FillPrepare

    cfg = EncoderConfig(name="vit", kind="hf-image", input="image", path=str(folder))
    n = len(images)
    table = pa.table({"id": np.arange(n), "image": pa.array(images, pa.binary()),
                      "__block": [0] * n, "__row": np.arange(n), "__source": ["src.parquet"] * n,
                      "__source_rows": [n] * n})
    stage = PrepareActor([cfg], ["id"], FillPrepare([cfg]))
    now = stage(table)
    decoded = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    floats = nested(stage.prepare["vit"].processor(images=decoded, return_tensors="np")
                    ["pixel_values"].astype(np.float32))
    at = now.column_names.index(prepared(cfg))
    before = now.set_column(at, prepared(cfg), floats)
    return {"uint8": now.nbytes / n, "float32_before": before.nbytes / n,
            "pixels_uint8": now.column(at).nbytes / n}


def raw_forward(folder: Path, images: list[bytes], rows: int, batch: int, device: str,
                precision: str) -> float:
    """Rows/s of the raw forward: pre-decoded uint8 pixels on the device, rescaled, normalised
    and cast there, the model in `precision` weights, pooled; no sync but the last."""
    import torch
    from PIL import Image
    from transformers import AutoModel, ViTImageProcessor

    processor = ViTImageProcessor.from_pretrained(folder)
    decoded = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    raw = processor(images=decoded, return_tensors="np", do_rescale=False,
                    do_normalize=False)["pixel_values"]
    reps = -(-batch // len(raw))
    block = torch.from_numpy(np.concatenate([raw] * reps)[:batch]).to(device)
    dtype = getattr(torch, precision)
    model = AutoModel.from_pretrained(folder).eval().to(device, dtype=dtype)
    mean = torch.tensor(processor.image_mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(processor.image_std, device=device).view(1, -1, 1, 1)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run() -> float:
        out = []
        sync()
        start = time.perf_counter()
        with torch.inference_mode():
            for i in range(0, rows, batch):
                x = block[:min(batch, rows - i)]
                x = ((x.float() / 255 - mean) / std).to(dtype)
                out.append(model(pixel_values=x).pooler_output.float())
            torch.cat(out).cpu()
        sync()
        return rows / (time.perf_counter() - start)

    run()
    return run()


def fill(folder: Path, source: Path, store: Path, rows: int, precision: str,
         busy: Busy | None) -> dict:
    """One image fill on the GPU pool: its rows/s between shards, its first shard's time and
    the GPU's busy share."""
    import raycache

    if busy is not None:
        busy.start()
    start = time.time()
    result = raycache.fill({
        "name": "gpu-images", "progress": False, "source": {"path": str(source), "key": "id"},
        "store": {"uri": str(store)}, "reuse": False, "pool": {"num_gpus": 1},
        "encoders": [{"name": "vit", "kind": "hf-image", "input": "image", "path": str(folder),
                      "precision": precision}],
    })
    if busy is not None:
        busy.halt.set()
    assert result.encoded_rows == rows, result.summary()
    shards = sorted((p.stat().st_mtime, pq.ParquetFile(p).metadata.num_rows)
                    for p in store.rglob("shards/*.parquet"))
    times = [t for t, _ in shards]
    span = times[-2] - times[0] if len(times) > 2 else None
    return {"pool": result.pool, "shards": len(shards), "rows_per_shard": shards[0][1],
            "rows_per_s_steady": sum(n for _, n in shards[1:-1]) / span if span else None,
            "rows_per_s_whole": rows / (time.time() - start),
            "first_shard_s": times[0] - start,
            "gpu_busy_pct": busy.mean(times[0], times[-2]) if busy and span else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--distinct", type=int, default=512, help="distinct JPEGs, repeated")
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--cpu", action="store_true", help="a tiny ViT on the CPU (smoke)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    import torch

    from raycache._fill.encode import block_rows
    from raycache._fill.plan import load_config

    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda:  # the same shape on a logical GPU, the model on the CPU
        from raycache._compute.pool import GPU_ON_CPU

        os.environ[GPU_ON_CPU] = "1"
        args.precision = "float32"
    device = "cuda" if cuda else "cpu"
    images = jpegs(min(args.distinct, args.rows))
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                 "cores": os.cpu_count(), "rows": args.rows, "precision": args.precision,
                 "model": "ViT-B/16 (random weights)" if cuda and not args.cpu else "tiny ViT"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = vit_folder(Path(tmp) / "vit", tiny=not cuda)
        out["hop_bytes_per_row"] = hop_bytes(folder, images[:16])
        enc = {"name": "vit", "kind": "hf-image", "input": "image", "path": str(folder)}
        plan = load_config({"name": "x", "source": {"path": tmp}, "store": {"uri": tmp},
                            "pool": {"num_gpus": 1}, "encoders": [enc]})
        out["block_rows"] = block_rows(plan, args.rows, 1.0)
        batch = min(out["block_rows"], 4096)  # the fill's forward: a block, 4,096 rows at most
        out["raw_rows_per_s"] = raw_forward(folder, images, args.rows, batch, device,
                                            args.precision)
        print(f"raw forward (uint8 on the device, {args.precision}, batches of {batch}): "
              f"{out['raw_rows_per_s']:,.0f} rows/s", flush=True)
        src = Path(tmp) / "src.parquet"
        column = pa.array((images * -(-args.rows // len(images)))[:args.rows], pa.binary())
        pq.write_table(pa.table({"id": np.arange(args.rows), "image": column}), src,
                       row_group_size=8192)
        ray.init(num_gpus=None if cuda else 1, include_dashboard=False, log_to_driver=False,
                 **({} if cuda else {"num_cpus": 4}))
        out["fill"] = fill(folder, src, Path(tmp) / "store", args.rows, args.precision,
                           Busy() if cuda else None)
        ray.shutdown()
    rate = out["fill"]["rows_per_s_steady"] or out["fill"]["rows_per_s_whole"]
    out["fill_of_raw"] = rate / out["raw_rows_per_s"]
    print(json.dumps(out["fill"]), flush=True)
    print(f"fill {rate:,.0f} rows/s = {out['fill_of_raw']:.2f} of the raw forward; "
          f"bytes a row across the hop: {out['hop_bytes_per_row']['uint8']:,.0f} (uint8) vs "
          f"{out['hop_bytes_per_row']['float32_before']:,.0f} (float32, before)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
