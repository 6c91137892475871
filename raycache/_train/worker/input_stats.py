"""The mean and standard deviation of a worker's training rows, summed across DDP workers, set
into every head that standardises its inputs (raycache._heads.modules.Standardized) before its
first step: a sweep's members and a lone run of the same settings get the same ones."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from raycache._fit.logreg import moment_sums, standardizer
from raycache._heads.modules import standardized
from raycache._train.console import say
from raycache._train.data.rows import Rows
from raycache._train.worker.heads import WorkerHeads

__all__ = ["BATCH", "fit_inputs", "moments"]

BATCH = 65_536
"""Rows per read of the pass that sums them (any size gives the same sums, up to rounding)."""


def fit_inputs(heads: WorkerHeads, train: Rows) -> None:
    """Set the standardising heads' mean and scale from every worker's training rows (one
    read of them in stored order); nothing when no head standardises. An overlap's rows
    (train.overlap: a fill under way) keep the identity: they are not all there yet."""
    layers = [s for s in (standardized(p.base) for p in heads.members) if s is not None]
    if not layers:
        return
    if train.overlap:
        if heads.spec.progress:
            say(f"the head standardises its inputs from every training row, and "
                f"{train.overlap}: its inputs stay as they are")
        return
    mean, scale = moments(train, layers[0].mean.shape[0], layers[0].mean.device)
    with torch.no_grad():
        for layer in layers:
            layer.mean.copy_(mean)
            layer.scale.copy_(scale)


def moments(train: Any, dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, standard deviation) of the training rows, float32 [dim], as the solved linear
    head and the probe's logreg standardise (raycache._fit.logreg.standardizer): from
    float64 sums over this worker's rows and, under DDP, every worker's; (0, 1) without rows."""
    sums = torch.zeros(2 * dim + 1, dtype=torch.float64, device=device)
    x = getattr(train, "x", None)
    parts = [x] if isinstance(x, torch.Tensor) else (b for b, _ in train.batches(BATCH, None))
    for part in parts:  # a pair objective's batches are [pairs, 2, dim]: each side a row
        sums += moment_sums(part.reshape(-1, dim).to(device))
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(sums)
    return standardizer(sums)
