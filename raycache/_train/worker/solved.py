"""A linear classifier solved full batch (optim.solver: lbfgs): the multinomial logistic
regression of its training rows, standardised (C means what it means to the probe's logreg:
raycache._fit.logreg), for every L2 strength of GRID at once (its batched L-BFGS), the
strength chosen on a fraction of the training rows left out of that solve (never the validation
rows), solved again on every training row, and the solution (for the raw features) recorded as
the run's one epoch, so the head is saved, loaded and served as any linear head is."""

from __future__ import annotations

import time
from typing import Any

import torch

from raycache._fit.logreg import GRID, MAX_ITER, TOL, moment_sums, solve, standardizer
from raycache._train.worker.epoch import (
    SLOTS,
    TRAIN_HIT,
    TRAIN_LOSS,
    TRAIN_N,
    epoch_metrics,
    evaluate,
)
from raycache._train.worker.heads import WorkerHeads
from raycache._train.worker.l2_search import Grid, finish, widen

__all__ = ["CHOOSE_FRACTION", "choose", "fit_pass", "inner_split", "place", "solution",
           "solve_head"]


def solve_head(heads: WorkerHeads, train: Any, val: Any
               ) -> tuple[list[list[float]], list[dict], float]:
    """Solve the run's one linear head on `train`: every L2 strength of GRID on most of the
    training rows, one chosen on the rest (CHOOSE_FRACTION of them, never the validation rows;
    the grid widened past an edge the choice lands on: l2_search.widen), then the chosen one
    solved again on every training row (continued past the iteration cap: l2_search.finish);
    leave its weights in the head and return (the epoch's slot sums on `val`, its objective
    metrics, seconds), as loop.record takes them. The validation rows are scored only: their
    metrics are honest."""
    t0 = time.perf_counter()
    kit = heads.members[0]
    w, b, found = solution(kit, heads.spec.class_weights, train)
    place(kit.base, w, b)  # for the raw features already
    sums = torch.zeros(1, SLOTS, dtype=torch.float64, device=kit.device)
    extra = evaluate(heads, val, sums)[0].compute()
    fit_pass(heads, train, sums)
    extra = {**epoch_metrics(kit, sums[0].tolist(), 0, 0.0, extra), **found}
    extra = {k: v for k, v in extra.items() if k not in SUMMED}
    return sums.tolist(), [extra], time.perf_counter() - t0


def solution(kit: Any, class_weights: Any, train: Any
             ) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """The linear solution of `train`'s rows for a head of `kit` (its classes, seed and
    monitor), as solve_head describes it: (W [D, K], b [K] for the raw features, the solve's
    metrics: solver, l2_C, lbfgs_iterations, l2_grid, ...). An mlp that starts as the linear
    head (raycache._train.worker.warm) takes the same one."""
    x, y = train.x.float(), train.y
    scale = standardizer(moment_sums(x))  # every training row's, for both solves
    classes, weights = kit.spec.head.num_classes, class_weights
    fit, held = inner_split(len(y), kit.spec.recipe.loop.seed, y.device)
    w, b, _ = solve(x[fit], y[fit], classes, list(GRID), MAX_ITER, TOL, weights, scale)
    grid = Grid(list(GRID), [_scored(x[held], y[held], w[g], b[g]) for g in range(len(GRID))],
                [(w[g], b[g]) for g in range(len(GRID))])

    def solve_one(c: float, start: tuple) -> tuple:
        w1, b1, _ = solve(x[fit], y[fit], classes, [c], MAX_ITER, TOL, weights, scale,
                          start=(start[0][None], start[1][None]))
        return w1[0], b1[0]

    pick = widen(grid, choose(grid.scores, kit.spec.recipe), solve_one,
                 lambda w1, b1: _scored(x[held], y[held], w1, b1),
                 lambda scores: choose(scores, kit.spec.recipe))
    c = grid.cs[pick]
    w, b, iterations, capped = finish(x, y, classes, c, weights, scale)
    return w, b, {
        "solver": "lbfgs", "lr": 0.0, "l2_C": c, "lbfgs_iterations": iterations,
        "l2_chosen_on": int(len(held)),
        "l2_widened": ", ".join(f"{v:g}" for v in grid.widened), "lbfgs_capped": capped,
        "l2_grid": ", ".join(f"C={v:g}: acc {m['val_acc']:.4f} on {len(held)} training "
                             "rows held out of the solve"
                             for v, m in zip(grid.cs, grid.scores, strict=True))}


CHOOSE_FRACTION = 0.2
"""The fraction of the training rows that chooses a solved head's L2 strength (the rest are
solved on); the validation rows never choose."""


def inner_split(n: int, seed: int, device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows solved on, rows that choose C): a seeded permutation of the n training rows,
    CHOOSE_FRACTION of them (at least one) choosing; with fewer than 5 rows, all rows do both."""
    if n < 5:
        every = torch.arange(n, device=device)
        return every, every
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(device)
    k = max(1, round(n * CHOOSE_FRACTION))
    return order[k:], order[:k]


def _scored(z: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor
            ) -> dict[str, float]:
    """Accuracy and mean cross-entropy of the solution (w [D, K], b [K], for raw features) on
    rows `z` with class ids `y`."""
    logits = z @ w + b
    return {"val_acc": float((logits.argmax(1) == y).float().mean()),
            "val_loss": float(torch.nn.functional.cross_entropy(logits, y))}


SUMMED = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "train_rows", "val_rows",
          "epoch_seconds", "rows_per_s", "placement")
"""epoch_metrics' own keys, recomputed by loop.record from the sums (lr: 0, no step taken)."""


def choose(candidates: list[dict[str, Any]], recipe: Any) -> int:
    """The L2 strength whose head is best on the rows that choose (scored under validation
    metrics' names): by val_acc (ties: the lower val_loss), or by evaluation.monitor where it
    names another metric than val_loss."""
    ev = recipe.evaluation
    key, sign = ("val_acc", 1.0) if ev.monitor == "val_loss" else (
        ev.monitor, 1.0 if ev.mode == "max" else -1.0)
    return max(range(len(candidates)), key=lambda i: (
        sign * candidates[i].get(key, candidates[i]["val_acc"]), -candidates[i]["val_loss"]))


def place(head: torch.nn.Module, w: torch.Tensor, b: torch.Tensor) -> None:
    """A solution [D, K], [K] into a linear head (its nn.Linear)."""
    layer = next(m for m in head.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        layer.weight.copy_(w.T)
        layer.bias.copy_(b)


def fit_pass(heads: WorkerHeads, train: Any, sums: torch.Tensor) -> None:
    """The training rows' loss and hits under the chosen head, into `sums`' training slots."""
    kit = heads.members[0]
    kit.base.eval()
    with torch.inference_mode():
        for x, y in train.batches(len(train) or 1, seed=None):
            out = kit.base(x.to(kit.device)).float()
            y = y.to(kit.device)
            sums[0, TRAIN_LOSS] += float(kit.objective.loss(out, y)[1]) * len(y)
            sums[0, TRAIN_HIT] += kit.objective.hits(out, y)
            sums[0, TRAIN_N] += len(y)
