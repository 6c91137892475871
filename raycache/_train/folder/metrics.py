"""What people look at during and after a run: one line per epoch, metrics.jsonl, TensorBoard
event files and a curve PNG in the run folder (all written by rank 0 only)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from raycache._cache.store import Store

__all__ = ["CURVES", "METRICS", "SWEEP", "TENSORBOARD", "curves_figure", "epoch_line",
           "read_sweep", "write_artifacts", "write_metrics", "write_sweep"]

METRICS = "metrics.jsonl"
CURVES = "curves.png"
TENSORBOARD = "tensorboard"
SWEEP = "sweep.jsonl"


def epoch_line(m: dict[str, Any], epochs: int, eta_s: float) -> str:
    """`epoch 3/10  train_loss 0.4123  val_loss ...  val_acc 0.912  5210 rows/s  eta 4s`."""
    return (f"epoch {m['epoch']}/{epochs}  train_loss {m['train_loss']:.4f}  "
            f"train_acc {m['train_acc']:.3f}  val_loss {m['val_loss']:.4f}  "
            f"val_acc {m['val_acc']:.3f}  lr {m['lr']:.2e}  "
            f"{m['rows_per_s']:.0f} rows/s  eta {eta_s:.0f}s")


def write_metrics(store: Store, run_dir: str, history: list[dict[str, Any]]) -> None:
    """metrics.jsonl: one JSON object per epoch (rewritten whole, so it is never torn)."""
    text = "".join(json.dumps(m, sort_keys=True) + "\n" for m in history)
    store.write_atomic(f"{run_dir}/{METRICS}", text.encode())


def write_sweep(store: Store, run_dir: str, rows: list[dict[str, Any]]) -> None:
    """sweep.jsonl: one JSON object per sweep member (settings, score, metrics, history)."""
    text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    store.write_atomic(f"{run_dir}/{SWEEP}", text.encode())


def read_sweep(store: Store, run_dir: str) -> list[dict[str, Any]]:
    """A sweep run's member records (empty for a single head's run)."""
    path = f"{run_dir}/{SWEEP}"
    if not store.exists(path):
        return []
    return [json.loads(line) for line in store.read_bytes(path).splitlines()]


def write_artifacts(store: Store, run_dir: str, history: list[dict[str, Any]]) -> None:
    """metrics.jsonl, TensorBoard event files (tensorboard/) and curves.png."""
    write_metrics(store, run_dir, history)
    if not history:
        return
    with tempfile.TemporaryDirectory() as tmp:
        _tensorboard(tmp, history)
        _curves(os.path.join(tmp, CURVES), history)
        if store.exists(f"{run_dir}/{TENSORBOARD}"):
            store.fs.rm(f"{run_dir}/{TENSORBOARD}", recursive=True)
        for root, _, files in os.walk(tmp):
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), tmp).replace(os.sep, "/")
                with open(os.path.join(root, name), "rb") as f:
                    store.write_atomic(f"{run_dir}/{rel}", f.read())


def _scalars(m: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in m.items()
            if k != "epoch" and isinstance(v, int | float) and not isinstance(v, bool)}


def _tensorboard(folder: str, history: list[dict[str, Any]]) -> None:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(os.path.join(folder, TENSORBOARD))
    for m in history:
        for k, v in _scalars(m).items():
            writer.add_scalar(k, v, global_step=int(m["epoch"]))
    writer.close()


def _curves(path: str, history: list[dict[str, Any]]) -> None:
    try:
        fig = curves_figure(history)
    except ImportError:  # an optional extra: the curves are a convenience
        return
    fig.savefig(path, dpi=72)


def curves_figure(history: list[dict[str, Any]]) -> Any:
    """Loss and accuracy by epoch, each epoch a marker; a run of one epoch (a solved head) as
    labelled bars of its values rather than an empty chart."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    epochs = [m["epoch"] for m in history]
    fig = Figure(figsize=(10, 3.5))
    loss_ax, acc_ax = fig.subplots(1, 2)
    for ax, keys, title in ((loss_ax, ("train_loss", "val_loss"), "loss"),
                            (acc_ax, ("train_acc", "val_acc"), "accuracy")):
        if len(history) == 1:  # one solve (a full-batch head): its values as bars, labelled
            bars = ax.bar(keys, [float(history[0][k]) for k in keys], color=["C0", "C1"])
            ax.bar_label(bars, fmt="%.4g")
            ax.set(title=title)
        else:
            for k in keys:
                ax.plot(epochs, [m[k] for m in history], label=k, marker="o")
            ax.set(title=title, xlabel="epoch")
            ax.legend()
    acc_ax.set(ylim=(0, 1.1 if len(history) == 1 else 1))
    if len(epochs) == 1:
        fig.suptitle(f"one epoch (epoch {epochs[0]}): a solved head, or a run of one epoch")
    return fig
