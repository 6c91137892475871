"""A linear classifier solved full batch (optim.solver: lbfgs): the multinomial logistic
regression of its training rows, standardised, for every L2 strength of GRID at once
(raycache._train.logreg's batched L-BFGS), the strength chosen on the validation rows, and the
solution mapped back to the raw features and recorded as the run's one epoch, so the head is
saved, loaded and served as any linear head is."""

from __future__ import annotations

import time
from typing import Any

import torch

from raycache._train.epoch import SLOTS, TRAIN_HIT, TRAIN_LOSS, TRAIN_N, epoch_metrics, evaluate
from raycache._train.logreg import GRID, MAX_ITER, TOL, solve
from raycache._train.worker_heads import WorkerHeads

__all__ = ["choose", "fit_pass", "place", "solve_head"]


def solve_head(team: WorkerHeads, train: Any, val: Any
               ) -> tuple[list[list[float]], list[dict], float]:
    """Solve the team's one linear head on `train`, choose its L2 strength on `val`, and leave
    the chosen weights in the head: (the epoch's slot sums, its objective metrics, seconds),
    as loop.record takes them."""
    t0 = time.perf_counter()
    parts = team.members[0]
    x, y = train.x.float(), train.y
    mu = x.mean(0)
    sd = x.std(0, correction=0)
    sd = torch.where(sd > 0, sd, torch.ones_like(sd))
    classes = parts.spec.head.num_classes
    w, b, iters = solve((x - mu) / sd, y, classes, list(GRID), MAX_ITER, TOL,
                        team.spec.class_weights)
    # ((x - mu) / sd) @ w + b  ==  x @ (w / sd) + (b - (mu / sd) @ w)
    w = w / sd[None, :, None]
    b = b - torch.einsum("d,gdk->gk", mu, w)
    scored = []
    for g in range(len(GRID)):
        place(parts.base, w[g], b[g])
        sums = torch.zeros(1, SLOTS, dtype=torch.float64, device=parts.device)
        extra = evaluate(team, val, sums)[0].compute()
        scored.append((epoch_metrics(parts, sums[0].tolist(), 0, 0.0, extra), sums))
    pick = choose([m for m, _ in scored], parts.spec.recipe)
    place(parts.base, w[pick], b[pick])
    sums = scored[pick][1]
    fit_pass(team, train, sums)
    extra = {**scored[pick][0], "solver": "lbfgs", "lr": 0.0, "l2_C": GRID[pick],
             "lbfgs_iterations": int(iters[pick]),
             "l2_grid": ", ".join(f"C={c:g}: val_acc {m['val_acc']:.4f}"
                                  for c, (m, _) in zip(GRID, scored, strict=True))}
    extra = {k: v for k, v in extra.items() if k not in SUMMED}
    return sums.tolist(), [extra], time.perf_counter() - t0


SUMMED = ("epoch", "train_loss", "train_acc", "val_loss", "val_acc", "train_rows", "val_rows",
          "epoch_seconds", "rows_per_s", "placement")
"""epoch_metrics' own keys, recomputed by loop.record from the sums (lr: 0, no step taken)."""


def choose(candidates: list[dict[str, Any]], recipe: Any) -> int:
    """The L2 strength whose head is best on the validation rows: by val_acc (ties: the lower
    val_loss), or by evaluation.monitor where it names another metric than val_loss."""
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


def fit_pass(team: WorkerHeads, train: Any, sums: torch.Tensor) -> None:
    """The training rows' loss and hits under the chosen head, into `sums`' training slots."""
    parts = team.members[0]
    parts.base.eval()
    with torch.inference_mode():
        for x, y in train.batches(len(train) or 1, seed=None):
            out = parts.base(x.to(parts.device)).float()
            y = y.to(parts.device)
            sums[0, TRAIN_LOSS] += float(parts.objective.loss(out, y)[1]) * len(y)
            sums[0, TRAIN_HIT] += parts.objective.hits(out, y)
            sums[0, TRAIN_N] += len(y)
