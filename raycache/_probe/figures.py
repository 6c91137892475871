"""A probe's figures as PNG bytes (matplotlib's Agg canvas, no pyplot state): accuracy by
encoder and method, a row's confusion matrix with class names, its per-class F1."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from raycache._probe.result import Outcome

__all__ = ["accuracy", "confusion", "confusion_png", "per_class_f1"]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.tight_layout()
    fig.savefig(out, format="png")
    return out.getvalue()


def accuracy(outcomes: list[Outcome], select: str) -> bytes:
    """Grouped bars: `select` of each method, one group per encoder."""
    encoders = list(dict.fromkeys(o.encoder for o in outcomes))
    methods = list(dict.fromkeys(o.method for o in outcomes))
    fig = _figure(max(5.0, 1.6 * len(encoders) * max(1, len(methods)) / 2 + 2), 4)
    ax = fig.add_subplot()
    width = 0.8 / len(methods)
    values = {(o.encoder, o.method): o.scores[select] for o in outcomes}
    for j, m in enumerate(methods):
        xs = np.arange(len(encoders)) + (j - (len(methods) - 1) / 2) * width
        ys = [values.get((e, m), np.nan) for e in encoders]
        bars = ax.bar(xs, ys, width, label=m)
        ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set_xticks(np.arange(len(encoders)), encoders)
    ax.set_ylabel(select)
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_title(f"{select} by encoder and method")
    return _png(fig)


def confusion(outcome: Outcome) -> bytes:
    """The confusion matrix (rows: true class, columns: predicted), counts in the cells."""
    return confusion_png(outcome.confusion, outcome.classes,
                         f"{outcome.encoder} {outcome.method}")


def confusion_png(conf: np.ndarray, names: list[str], title: str) -> bytes:
    """A confusion matrix with class names on both axes (rows: true, columns: predicted)."""
    side = max(4.0, 0.5 * len(names) + 2)
    fig = _figure(side + 1, side)
    ax = fig.add_subplot()
    im = ax.imshow(conf, cmap="Blues")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(names) <= 30:
        top = conf.max() or 1
        for i in range(len(names)):
            for j in range(len(names)):
                ax.text(j, i, int(conf[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if conf[i, j] > top / 2 else "black")
    ax.set_title(title)
    return _png(fig)


def per_class_f1(outcome: Outcome) -> bytes:
    """Horizontal bars: each class's F1, its support beside it."""
    rows = outcome.per_class()
    names = list(rows)
    fig = _figure(6, max(3.0, 0.3 * len(names) + 1.5))
    ax = fig.add_subplot()
    bars = ax.barh(names, [rows[n]["f1"] for n in names])
    ax.bar_label(bars, labels=[f"{rows[n]['f1']:.3f} (n={rows[n]['support']})" for n in names],
                 fontsize=7)
    ax.set_xlim(0, 1.15)
    ax.invert_yaxis()
    ax.set_xlabel("F1")
    ax.set_title(f"per-class F1: {outcome.encoder} {outcome.method}")
    return _png(fig)
