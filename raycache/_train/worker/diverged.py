"""A head stopped at the first epoch whose training or validation loss is NaN or infinite,
with where it happened and what to change: a lone run fails, a sweep member stops alone
(checked on the epoch's all-reduced sums, so every worker stops at the same point, and costs
no sync inside the loop)."""

from __future__ import annotations

import math

import torch

from raycache._errors import DivergedError
from raycache._train.worker.epoch import TRAIN_LOSS, VAL_LOSS
from raycache._train.worker.heads import WorkerHeads

__all__ = ["check_finite", "message", "stop"]


def check_finite(heads: WorkerHeads, epoch: int, total: list[list[float]], local: torch.Tensor,
                 steps_before: int, rank: int) -> None:
    """Each head whose summed losses of the epoch (`total`: every worker's) are not finite:
    a lone head, or every member of a sweep, raises a DivergedError; a sweep member whose
    others are finite stops alone (`stop`), and the others go on. `local`: this worker's
    (TRAIN_LOSS, FINITE) per head before the sum, `steps_before`: optimizer steps taken
    before the epoch."""
    bad = [i for i, row in enumerate(total) if not heads.progress[i].diverged
           and not (math.isfinite(row[TRAIN_LOSS]) and math.isfinite(row[VAL_LOSS]))]
    if not bad:
        return
    texts = {i: message(heads, i, epoch, total, local, steps_before, rank) for i in bad}
    left = [i for i, p in enumerate(heads.progress) if not p.diverged and i not in texts]
    if not heads.spec.sweep or not left:
        every = " (as did every other member of the sweep)" if heads.spec.sweep else ""
        raise DivergedError(texts[bad[0]].replace(" diverged in", f"{every} diverged in", 1))
    for i in bad:
        stop(heads, i, texts[i])


def stop(heads: WorkerHeads, i: int, text: str) -> None:
    """Sweep member i diverged: it stops here (this epoch not recorded, as for a lone run),
    its learning rate set to 0 and its gradients dropped from now on."""
    progress = heads.progress[i]
    progress.diverged, progress.stopped = text, True
    for group in heads.members[i].opt.param_groups:
        group["lr"] = 0.0


def message(heads: WorkerHeads, i: int, epoch: int, total: list[list[float]], local: torch.Tensor,
            steps_before: int, rank: int) -> str:
    """Where head i diverged and what to change."""
    spec = heads.spec
    r = heads.members[i].spec.recipe
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
    return (f"training run {spec.run_name!r} {who}diverged in epoch {epoch + 1}: {where}. "
            "Nothing of this epoch was saved, and running the same config again repeats it: "
            f"{', '.join(fixes[:-1])}, or {fixes[-1]}")
