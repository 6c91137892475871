"""A run stopped at the first epoch whose training or validation loss is NaN or infinite,
with where it happened and what to change (checked on the epoch's all-reduced sums, so every
worker stops at the same point, and costs no sync inside the loop)."""

from __future__ import annotations

import math

import torch

from raycache.errors import DivergedError
from raycache.train.epoch import TRAIN_LOSS, VAL_LOSS
from raycache.train.team import Team

__all__ = ["check_finite"]


def check_finite(team: Team, epoch: int, total: list[list[float]], local: torch.Tensor,
                 steps_before: int, rank: int) -> None:
    """A DivergedError where a head's summed losses of the epoch (`total`: every worker's)
    are not finite; `local`: this worker's (TRAIN_LOSS, FINITE) per head before the sum,
    `steps_before`: optimizer steps taken before the epoch."""
    bad = [i for i, row in enumerate(total)
           if not (math.isfinite(row[TRAIN_LOSS]) and math.isfinite(row[VAL_LOSS]))]
    if not bad:
        return
    i, spec = bad[0], team.spec
    r = team.members[i].spec.recipe
    who = f"sweep member {dict(spec.sweep[i].settings)} " if spec.sweep else ""
    if math.isfinite(total[i][TRAIN_LOSS]):
        where = ("the validation loss is NaN or infinite (the training loss is finite): the "
                 "head's outputs on some validation rows are not finite")
    elif math.isfinite(float(local[i, 0])):
        where = "the training loss became NaN or infinite on another worker"
    else:
        batch = int(local[i, 1]) + 1
        step = steps_before + -(-batch // r.optim.grad_accum)
        where = (f"the training loss became NaN or infinite at batch {batch} of the epoch "
                 f"(optimizer step {step} of the run) on worker {rank}")
    fixes = [f"lower optim.lr (now {r.optim.lr:g})"]
    if not r.optim.grad_clip:
        fixes.append("clip gradients with optim.grad_clip (e.g. 1.0)")
    if r.optim.precision != "float32":
        fixes.append(f"train in optim.precision: float32 (now {r.optim.precision})")
    fixes.append("check the cache's embeddings for NaN or infinite values")
    raise DivergedError(
        f"training run {spec.run_name!r} {who}diverged in epoch {epoch + 1}: {where}. Nothing "
        "of this epoch was saved, and running the same config again repeats it: "
        f"{', '.join(fixes[:-1])}, or {fixes[-1]}")
