"""The per-worker training loop that Ray Train runs on each DDP worker."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
import torch.nn.functional as F

from raycache.heads import REGISTRY as HEADS
from raycache.split import split
from raycache.store import Store

HEAD_WEIGHTS = "head.pt"
HEAD_CONFIG = "head.json"


def to_tensors(
    batch: pa.Table, encoders: list[str], label: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated embedding columns as float32 features, and the label column as int64."""
    feats = []
    for name in encoders:
        col = batch.column(name).combine_chunks()
        flat = col.flatten().to_numpy(zero_copy_only=False)
        feats.append(flat.reshape(len(col), col.type.list_size))
    x = torch.from_numpy(np.concatenate(feats, axis=1, dtype=np.float32))
    y = torch.from_numpy(batch.column(label).to_numpy().astype(np.int64))
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def build_head(spec: dict[str, Any]) -> torch.nn.Module:
    return HEADS[spec["head"]](spec["in_dim"], spec["num_classes"], spec["hidden"], spec["dropout"])


def load_share(spec: dict[str, Any], rank: int, world: int) -> pa.Table:
    """This worker's contiguous 1/world of the cache's rows, read straight from the store."""
    store = Store(spec["store"]["uri"], spec["store"]["options"])
    total = sum(rows for _, rows in spec["shards"])
    lo, hi = total * rank // world, total * (rank + 1) // world
    columns = [spec["key"], spec["label"], *spec["encoders"]]
    tables, start = [], 0
    for path, rows in spec["shards"]:
        end = start + rows
        if end > lo and start < hi:
            with store.fs.open(path, "rb") as f:
                t = pq.read_table(f, columns=columns)
            tables.append(t.slice(max(lo - start, 0), min(hi, end) - max(lo, start)))
        start = end
    return pa.concat_tables(tables) if tables else None


class InMemory:
    """A worker's share held as two tensors (host or device memory), reshuffled every epoch."""

    def __init__(self, table: pa.Table | None, spec: dict[str, Any], device: torch.device):
        if table is None or table.num_rows == 0:
            self.x = torch.empty(0, spec["in_dim"], device=device)
            self.y = torch.empty(0, dtype=torch.int64, device=device)
        else:
            self.x, self.y = to_tensors(table, spec["encoders"], spec["label"], device)

    def batches(self, batch_size: int, seed: int | None) -> Iterator[tuple[torch.Tensor, ...]]:
        n = len(self.y)
        if seed is None:
            order = torch.arange(n, device=self.x.device)
        else:
            g = torch.Generator().manual_seed(seed)
            order = torch.randperm(n, generator=g).to(self.x.device)
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            yield self.x[idx], self.y[idx]


class Streamed:
    """A worker's share read from the store on every pass (for caches larger than memory)."""

    def __init__(self, shard: Any, spec: dict[str, Any], device: torch.device):
        self.shard, self.spec, self.device = shard, spec, device

    def batches(self, batch_size: int, seed: int | None) -> Iterator[tuple[torch.Tensor, ...]]:
        shuffle = {} if seed is None else {
            "local_shuffle_buffer_size": batch_size * 8, "local_shuffle_seed": seed
        }
        for batch in self.shard.iter_batches(
            batch_size=batch_size, batch_format="pyarrow", **shuffle
        ):
            yield to_tensors(batch, self.spec["encoders"], self.spec["label"], self.device)


def holders(spec: dict[str, Any], rank: int, world: int, device: torch.device) -> tuple:
    """(train, validation) data of this worker, in the spec's placement."""
    placement = spec["placement"]
    if placement == "stream":
        return tuple(
            Streamed(ray.train.get_dataset_shard(name), spec, device) for name in ("train", "val")
        )
    if placement == "gpu" and device.type != "cuda":
        raise RuntimeError("placement 'gpu' needs use_gpu: true and a CUDA device")
    table = load_share(spec, rank, world)
    where = device if placement == "gpu" else torch.device("cpu")
    parts = [
        None if table is None else split(table, spec["key"], spec["val_fraction"], validation)
        for validation in (False, True)
    ]
    return tuple(InMemory(part, spec, where) for part in parts)


def train_loop(spec: dict[str, Any]) -> list[dict[str, float]]:
    """Train the head on this worker's share of the cache; rank 0 returns the metric history."""
    torch.manual_seed(spec["seed"])
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    device = ray.train.torch.get_device()
    train_data, val_data = holders(spec, rank, ctx.get_world_size(), device)
    model = ray.train.torch.prepare_model(build_head(spec))
    opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"])
    bs = spec["batch_size"]
    history: list[dict[str, float]] = []
    for epoch in range(spec["epochs"]):
        start = time.perf_counter()
        model.train()
        sums = torch.zeros(6, dtype=torch.float64, device=device)
        join = model.join() if hasattr(model, "join") else contextlib.nullcontext()
        with join:
            for x, y in train_data.batches(bs, seed=spec["seed"] * 100_003 + epoch * 101 + rank):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                logits = model(x)
                loss = F.cross_entropy(logits, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sums[0] += loss.detach().double() * len(y)
                sums[1] += (logits.argmax(1) == y).sum()
                sums[2] += len(y)
        model.eval()
        with torch.inference_mode():
            for x, y in val_data.batches(bs * 4, seed=None):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                logits = model(x)
                sums[3] += F.cross_entropy(logits, y, reduction="sum").double()
                sums[4] += (logits.argmax(1) == y).sum()
                sums[5] += len(y)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
        s = sums.tolist()
        metrics = {
            "epoch": epoch + 1,
            "train_loss": s[0] / max(s[2], 1),
            "train_acc": s[1] / max(s[2], 1),
            "val_loss": s[3] / max(s[5], 1),
            "val_acc": s[4] / max(s[5], 1),
            "train_rows": int(s[2]),
            "val_rows": int(s[5]),
            "epoch_seconds": time.perf_counter() - start,
            "placement": spec["placement"],
        }
        history.append(metrics)
        if spec["progress"] and rank == 0:
            print(f"epoch {epoch + 1}/{spec['epochs']}  train_loss {metrics['train_loss']:.4f}  "
                  f"val_loss {metrics['val_loss']:.4f}  val_acc {metrics['val_acc']:.3f}",
                  flush=True)
        every = spec["checkpoint_every"]
        save = epoch + 1 == spec["epochs"] or (every > 0 and (epoch + 1) % every == 0)
        _report(model, spec, metrics, history, checkpoint=save and rank == 0)
    return history


def _report(
    model: torch.nn.Module, spec: dict, metrics: dict, history: list, checkpoint: bool
) -> None:
    """Every worker reports; rank 0 attaches the head and its config when it is time to save."""
    if not checkpoint:
        ray.train.report(metrics)
        return
    state = (model.module if hasattr(model, "module") else model).state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({k: v.cpu() for k, v in state.items()}, os.path.join(tmp, HEAD_WEIGHTS))
        with open(os.path.join(tmp, HEAD_CONFIG), "w") as f:
            json.dump({**spec, "metrics": metrics, "history": history}, f, indent=2)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp))
