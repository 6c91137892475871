"""Classification metrics from a confusion matrix: accuracy, macro F1, balanced accuracy and
each class's precision, recall, F1 and support (a confusion matrix sums across workers, so
these never need the predictions gathered)."""

from __future__ import annotations

import numpy as np

__all__ = ["confusion", "per_class", "scores"]


def confusion(y: np.ndarray, pred: np.ndarray, classes: int) -> np.ndarray:
    """counts[i, j]: rows of true class i predicted as j."""
    y, pred = np.asarray(y, np.int64), np.asarray(pred, np.int64)
    return np.bincount(y * classes + pred, minlength=classes * classes).reshape(classes, classes)


def _parts(conf: np.ndarray) -> tuple[np.ndarray, ...]:
    hit = np.diag(conf).astype(np.float64)
    support, predicted = conf.sum(1).astype(np.float64), conf.sum(0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, hit / predicted, 0.0)
        recall = np.where(support > 0, hit / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    return precision, recall, f1, support, predicted


def scores(conf: np.ndarray) -> dict[str, float]:
    """val_acc; macro_f1 over the classes that occur or are predicted, and balanced_acc (mean
    recall) over the classes that occur: scikit-learn's definitions."""
    _, recall, f1, support, predicted = _parts(conf)
    total = conf.sum()
    seen = (support > 0) | (predicted > 0)
    return {"val_acc": float(np.trace(conf) / total) if total else 0.0,
            "macro_f1": float(f1[seen].mean()) if seen.any() else 0.0,
            "balanced_acc": float(recall[support > 0].mean()) if (support > 0).any() else 0.0}


def per_class(conf: np.ndarray, names: list[str]) -> dict[str, dict[str, float]]:
    """Each class's precision, recall, f1 and support, by its name."""
    precision, recall, f1, support, _ = _parts(conf)
    return {str(n): {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for n, p, r, f, s in zip(names, precision, recall, f1, support, strict=True)}
