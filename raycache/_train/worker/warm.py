"""An mlp that starts as the solved linear head (HeadSpec.linear_start): the linear head's own
L-BFGS solution (worker.solved.solution: the same rows, standardisation, C and seed) written
into each head before its first step (raycache._heads.linear_start), and scored as the run's
first epoch. Every later epoch competes with it for the served weights on the monitored
metric, so the mlp a run serves scores on its validation rows at least what the default
linear head scores there: it stays the linear head unless training does better."""

from __future__ import annotations

import time
from typing import Any

import torch

from raycache._heads.linear_start import place_linear
from raycache._train.console import say
from raycache._train.data.rows import Rows
from raycache._train.worker.epoch import (
    SLOTS,
    TRAIN_HIT,
    TRAIN_LOSS,
    TRAIN_N,
    VAL_HIT,
    VAL_LOSS,
    VAL_N,
    evaluate,
)
from raycache._train.worker.heads import WorkerHeads

__all__ = ["first_epoch", "start_linear", "why_not"]


def why_not(heads: WorkerHeads, train: Rows) -> str | None:
    """Why these heads cannot start as the linear head here (None: they can; "" : none asks)."""
    from raycache._fit.logreg import GRID
    from raycache._train.defaults import SOLVE_BYTES

    spec = heads.spec
    if not all(p.spec.head.linear_start for p in heads.members):
        return ""
    if spec.world > 1:
        return "the solve runs in one process, and this run has DDP workers"
    if train.overlap:
        return f"the solve needs every row, and {train.overlap}"
    if not isinstance(getattr(train, "x", None), torch.Tensor):
        return "the solve needs the rows in memory, and this run streams them"
    head = heads.members[0].spec.head
    need = len(train.y) * (head.in_dim + 2 * len(GRID) * head.num_classes) * 4
    if need > SOLVE_BYTES:
        return f"its solve would need {need / 2**30:.1f} GiB beside the rows"
    return None


def start_linear(heads: WorkerHeads, train: Rows) -> dict[str, Any] | None:
    """Write the linear solution into every head (before DDP, compile and a sweep's stack take
    their weights); the solve's metrics, or None where the heads start at random (a line
    says why, where a head asked to start linear)."""
    from raycache._train.worker.solved import solution

    why = why_not(heads, train)
    if why is not None:
        if why and heads.spec.progress:
            say(f"the mlp starts at random, not as the linear head: {why}")
        return None
    t0 = time.perf_counter()
    w, b, found = solution(heads.members[0], heads.spec.class_weights, train)
    for kit in heads.members:
        place_linear(kit.base, w, b)
    found = {k: v for k, v in found.items() if k != "solver"}
    return {**found, "start": "linear (L-BFGS)", "solve_seconds": time.perf_counter() - t0}


def first_epoch(heads: WorkerHeads, train: Any, val: Any, found: dict[str, Any]
                ) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """The heads as started, scored as the run's first epoch (no step taken): the slot sums of
    `val` and of `train` (scored as validation is: in eval mode, the plain loss), and each
    head's objective metrics with the solve's, as loop.record takes them."""
    n = len(heads.members)
    device = heads.members[0].device
    sums = torch.zeros(n, SLOTS, dtype=torch.float64, device=device)
    evaluators = evaluate(heads, val, sums)
    fit = torch.zeros(n, SLOTS, dtype=torch.float64, device=device)
    evaluate(heads, train, fit)
    for to, of in ((TRAIN_LOSS, VAL_LOSS), (TRAIN_HIT, VAL_HIT), (TRAIN_N, VAL_N)):
        sums[:, to] = fit[:, of]
    extras = (evaluators[0].compute_each() if heads.stack is not None
              else [e.compute() for e in evaluators])
    return sums.tolist(), [{**extra, **found} for extra in extras]
