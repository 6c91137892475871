"""Metrics of scored pairs: Spearman and Pearson correlation (the STS convention), ROC-AUC and
accuracy at the best threshold (0/1 labels).

Hand-written because torchmetrics, which has them, costs ~4 s to import on a 2-core machine
(tests check the values against torchmetrics'); each is a sort and a few sums here.
"""

from __future__ import annotations

import torch

__all__ = ["best_accuracy", "pearson", "ranks", "roc_auc", "spearman"]


def ranks(v: torch.Tensor) -> torch.Tensor:
    """1-based ranks of v's values, ties given their average rank (float64)."""
    _, inverse, counts = torch.unique(v, sorted=True, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    return (ends - (counts.double() - 1) / 2)[inverse]


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation (0 when either side is constant)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    norm = (a.norm() * b.norm()).item()
    return float((a * b).sum() / norm) if norm > 0 else 0.0


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation: Pearson's of the tie-averaged ranks."""
    return pearson(ranks(a), ranks(b))


def roc_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve of scores (higher: more likely positive) for 0/1 labels: the
    chance that a positive outscores a negative, ties counting half (Mann-Whitney)."""
    pos = labels.bool()
    p, n = int(pos.sum()), int((~pos).sum())
    if p == 0 or n == 0:
        return 0.5
    return float((ranks(scores)[pos].sum() - p * (p + 1) / 2) / (p * n))


def best_accuracy(scores: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """(accuracy, threshold): the best accuracy of `score > threshold` as the prediction, over
    every threshold between two distinct scores (and below or above them all)."""
    n = len(scores)
    if n == 0:
        return 0.0, 0.0
    s, order = torch.sort(scores.double(), descending=True, stable=True)
    y = labels[order].double()
    negatives = n - y.sum()
    k = torch.arange(1, n + 1, dtype=torch.float64, device=s.device)
    tp = y.cumsum(0)
    acc = (tp + negatives - (k - tp)) / n  # the top k predicted positive
    cut = torch.ones(n, dtype=torch.bool, device=s.device)
    cut[:-1] = s[:-1] > s[1:]  # only between distinct scores
    acc = torch.where(cut, acc, torch.full_like(acc, -1.0))
    best = int(acc.argmax())
    if float(negatives) / n >= float(acc[best]):  # none predicted positive
        return float(negatives) / n, float(s[0])
    below = float(s[best + 1]) if best + 1 < n else float(s[best]) - 1.0
    return float(acc[best]), (float(s[best]) + below) / 2
