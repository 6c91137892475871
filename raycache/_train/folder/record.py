"""A cache's training runs: each run folder's run.json record, and listing runs with status."""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from raycache._cache.committed import Cache
from raycache._cache.store import RUNS, Store
from raycache._errors import RaycacheError
from raycache._heads.specs import HEAD_CONFIG
from raycache._train.console import number, settings_text, sweep_text
from raycache._train.folder.checkpoints import PREFIX, latest

__all__ = ["MAIN", "RECORD", "RESUMABLE", "RunInfo", "checkpoint_of", "driver_alive", "list_runs",
           "read_record", "runs_dir", "write_record"]

RECORD = "run.json"
RESUMABLE = ("resumable", "failed (resumable)")
"""Statuses of runs that died with a checkpoint: running them again resumes."""
UNREADABLE = "unreadable (run.json damaged)"
MAIN = ("val_acc", "val_f1", "val_recall_at_1", "val_mrr", "val_auc", "val_spearman")
"""The objectives' main metrics, which `raycache runs` shows beside the monitored one: accuracy
and macro-F1, or retrieval's and pairs' metrics."""


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
    """One training run of a cache, as its run folder records it (`list_runs`).

    Example:
        ```python
        for run in raycache.list_runs(raycache.open_cache("docs")):
            print(run.line())
        ```
    """

    name: str
    """The run's folder name under the cache's runs/ (its run_name)."""
    status: str
    """finished, failed, running, resumable (interrupted with a checkpoint) or interrupted."""
    epochs_done: int
    """Epochs with metrics recorded."""
    epochs: int
    """Epochs the run trains at most, as its recorded recipe says."""
    best: dict[str, Any]
    """The monitored metric at its best epoch, e.g. {"val_acc": 0.93, "epoch": 4} (a sweep:
    the selected member's, with its settings)."""
    metrics: dict[str, Any]
    """The last epoch's metrics."""
    updated: str
    """When run.json was last written, ISO 8601 in UTC."""
    objective: str = ""
    """What the head learns: classification, groups or pairs."""
    head: str = ""
    """The head's family (mlp, linear, ...), or a sweep's "sweep of N mlp heads over hidden"."""
    monitor: str = ""
    """The metric the run monitors (a sweep: the one that selects its head)."""
    checkpoint: str = ""
    """The checkpoint `raycache predict --checkpoint` takes (the run's final one, else its
    newest complete one); empty when the run has none yet."""
    started: str = ""
    """When the run started, ISO 8601 in UTC (empty where its record does not say)."""
    served: dict[str, Any] = field(default_factory=dict)
    """The metrics of the epoch whose weights the checkpoint holds (what predict serves): its
    head.json's weights_epoch in the history; the last epoch's where it does not say."""
    cache: str = ""
    """The version the run trained on, "name/fingerprint"."""

    def line(self, metric: str | None = None) -> str:
        """The run as `raycache runs` prints it.

        Args:
            metric: The metric to headline (default: the monitored one).

        Returns:
            Two lines: the run (status, epochs, objective/head, `metric` of the served epoch,
            whose weights the checkpoint holds, beside its best and the last epoch's where
            they differ, and the objective's other main metrics of the served epoch) and the
            checkpoint `raycache predict --checkpoint` takes.
        """
        key, best = metric or self.monitor or "val_loss", self.best
        shown = self.served or self.metrics
        at = f" at epoch {shown['epoch']}" if "epoch" in shown else ""
        also = []
        if key in best:
            chosen = (f", head #{best['member']} {settings_text(best.get('settings', {}))}"
                      if "member" in best else "")
            where = f" at epoch {best['epoch']}" if "epoch" in best else ""
            also.append(f"best {number(best.get(key))}{where}{chosen}")
        if self.metrics.get("epoch") != shown.get("epoch"):
            also.append(f"last epoch {self.metrics.get('epoch', '?')}: "
                        f"{number(self.metrics.get(key))}")
        said = f" ({'; '.join(also)})" if also else ""
        more = "".join(f", {k} {number(shown[k])}" for k in MAIN
                       if k != key and k in shown)  # the objective's main metrics too
        return (f"{self.name:<28} {self.status:<10} {self.epochs_done:>4}/{self.epochs:<4} "
                f"{self.objective or '-'}/{self.head or '-'}  {key} {number(shown.get(key))}"
                f" served{at}{said}{more}  {self.updated}  {self.cache}\n{'':<4}checkpoint "
                f"{self.checkpoint or '- (none yet)'}")


def checkpoint_of(path: str, options: dict[str, Any] | None = None) -> str:
    """The head checkpoint folder `path` names: itself when it holds head.json; a run folder's
    final (else newest complete) checkpoint; anything else unchanged, for load_head to judge."""
    folder = Store(path, options or {})
    if folder.exists(folder.path(HEAD_CONFIG)):
        return path
    names = folder.listdir(folder.root) if folder.is_dir(folder.root) else []
    if RECORD not in names and not any(n.startswith(PREFIX) for n in names):
        return path
    found = latest(folder, folder.root)
    if found is None:
        raise RaycacheError(
            f"run folder {path!r} has no complete checkpoint yet (a {PREFIX}* folder with "
            "state.pt): a run saves one at its end and every checkpoints.every epochs; let it "
            "train (running its config again resumes it), or pass another run's folder")
    return folder.url(found)


def driver_alive(record: dict[str, Any]) -> bool:
    """Whether the driver a record names (its host and pid) may be alive: on this host, its
    process exists; another host's is trusted to be."""
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
    """Every training run of a cache with its status and best metrics, oldest first.

    A run whose run.json cannot be read is listed with status "unreadable (run.json damaged)".

    Args:
        cache: The committed cache the runs trained on, from `open_cache`.

    Returns:
        One RunInfo per run folder.

    Raises:
        StoreError: The store cannot be read (StoreUnavailable: after its retries).

    Example:
        ```python
        runs = raycache.list_runs(raycache.open_cache("docs"))
        [r.checkpoint for r in runs if r.status == "finished"]
        ```
    """
    import json

    store, root = cache.store, runs_dir(cache)
    out = []
    for name in store.listdir(root):
        try:
            record = read_record(store, f"{root}/{name}")
        except ValueError:  # a damaged run.json: listed as such, never trusted (du, gc)
            out.append(RunInfo(name, UNREADABLE, 0, 0, {}, {}, "",
                               cache=f"{cache.name}/{cache.fingerprint}"))
            continue
        if record is None:
            continue
        status = record["status"]
        final = latest(store, f"{root}/{name}")
        has_ckpt = final is not None
        if status == "running" and not driver_alive(record):
            status = RESUMABLE[0] if has_ckpt else "interrupted"
        elif status == "failed" and has_ckpt and record.get("resumable", True):
            status = RESUMABLE[1]
        history = []
        metrics_path = f"{root}/{name}/metrics.jsonl"
        if store.exists(metrics_path):
            with contextlib.suppress(ValueError):  # damaged: the run is listed without them
                history = [json.loads(line)
                           for line in store.read_bytes(metrics_path).splitlines()]
        recipe = record.get("recipe", {})
        sweep = record.get("sweep") or []
        family = record.get("head", {}).get("head", "")
        out.append(RunInfo(
            name=name, status=status, epochs_done=len(history),
            epochs=recipe_epochs(recipe), best=record.get("best", {}),
            metrics=history[-1] if history else {}, updated=record.get("updated", ""),
            objective=recipe.get("objective", ""),
            head=sweep_text(sweep, family) if sweep else family,
            monitor=record.get("select") or recipe.get("evaluation", {}).get("monitor", ""),
            checkpoint=store.url(final) if final else "", started=record.get("started", ""),
            served=_served(store, final, history), cache=f"{cache.name}/{cache.fingerprint}",
        ))
    return sorted(out, key=lambda r: r.updated)


def _served(store: Store, final: str | None, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The served epoch's metrics: the final checkpoint's head.json names the epoch."""
    if final is None or not history:
        return {}
    with contextlib.suppress(ValueError, OSError, KeyError):
        epoch = store.read_json(f"{final}/{HEAD_CONFIG}").get("weights_epoch")
        return next((m for m in history if epoch and m.get("epoch") == epoch), history[-1])
    return history[-1]


def recipe_epochs(recipe: dict[str, Any]) -> int:
    """A run record's epochs: under its recipe's loop group, or flat (records written before
    the config was grouped)."""
    return recipe.get("loop", {}).get("epochs", recipe.get("epochs", 0))
