"""A cache's training runs: each run folder's run.json record, and listing runs with status."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from raycache.cache.committed import Cache
from raycache.cache.store import RUNS, Store
from raycache.train.checkpoint import latest

__all__ = ["RECORD", "RESUMABLE", "RunInfo", "list_runs", "read_record", "runs_dir", "write_record"]

RECORD = "run.json"
RESUMABLE = ("resumable", "failed (resumable)")
"""Statuses of runs that died with a checkpoint: running them again resumes."""


def runs_dir(cache: Cache) -> str:
    return cache.store.path(cache.name, cache.fingerprint, RUNS)


def read_record(store: Store, run_dir: str) -> dict[str, Any] | None:
    path = f"{run_dir}/{RECORD}"
    return store.read_json(path) if store.exists(path) else None


def write_record(store: Store, run_dir: str, record: dict[str, Any], status: str,
                 **more: Any) -> dict[str, Any]:
    """run.json with a status: running (with this driver's host and pid), finished or failed."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    out = {**record, **more, "status": status, "updated": now,
           "host": socket.gethostname(), "pid": os.getpid()}
    out.setdefault("started", now)
    store.write_json(f"{run_dir}/{RECORD}", out)
    return out


@dataclass(frozen=True)
class RunInfo:
    name: str
    status: str
    """finished, failed, running, resumable (interrupted with a checkpoint) or interrupted."""
    epochs_done: int
    epochs: int
    best: dict[str, Any]
    metrics: dict[str, Any]
    updated: str

    def line(self) -> str:
        m = self.metrics
        best = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in self.best.items())
        return (f"{self.name:<28} {self.status:<10} {self.epochs_done:>4}/{self.epochs:<4} "
                f"val_acc {m.get('val_acc', float('nan')):.3f}  best: {best or '-'}  "
                f"{self.updated}")


def _alive(record: dict[str, Any]) -> bool:
    if record.get("host") != socket.gethostname():
        return True  # another machine's driver: trust the record
    try:
        os.kill(int(record["pid"]), 0)
    except (ProcessLookupError, KeyError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def list_runs(cache: Cache) -> list[RunInfo]:
    """Every run of a cache with its status and best metrics, oldest first."""
    import json

    store, root = cache.store, runs_dir(cache)
    out = []
    for name in store.listdir(root):
        record = read_record(store, f"{root}/{name}")
        if record is None:
            continue
        status = record["status"]
        has_ckpt = latest(store, f"{root}/{name}") is not None
        if status == "running" and not _alive(record):
            status = RESUMABLE[0] if has_ckpt else "interrupted"
        elif status == "failed" and has_ckpt and record.get("resumable", True):
            status = RESUMABLE[1]
        history = []
        metrics_path = f"{root}/{name}/metrics.jsonl"
        if store.exists(metrics_path):
            history = [json.loads(line) for line in store.read_bytes(metrics_path).splitlines()]
        out.append(RunInfo(
            name=name, status=status, epochs_done=len(history),
            epochs=recipe_epochs(record.get("recipe", {})), best=record.get("best", {}),
            metrics=history[-1] if history else {}, updated=record.get("updated", ""),
        ))
    return sorted(out, key=lambda r: r.updated)


def recipe_epochs(recipe: dict[str, Any]) -> int:
    """A run record's epochs: under its recipe's loop group, or flat (records written before
    the config was grouped)."""
    return recipe.get("loop", {}).get("epochs", recipe.get("epochs", 0))
