"""One epoch of a worker's heads: training steps, validation, and the epoch's metrics from
the per-head sums all-reduced across workers."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from raycache._train.objectives import Evaluator
from raycache._train.objectives.gather import lockstep
from raycache._train.runspec import WorkerSpec
from raycache._train.worker.heads import Kit, WorkerHeads

__all__ = ["FINITE", "SAVE_NOW", "SLOTS", "TRAIN_LOSS", "VAL_LOSS", "autocast", "epoch_metrics",
           "epoch_seed", "evaluate", "train_epoch"]

# Slots of the per-epoch sums all-reduced across workers (one row of them per head). FINITE
# counts the batches before the training loss sum turned NaN or infinite (it never turns back):
# the first bad batch, found with no sync in the loop.
TRAIN_LOSS, TRAIN_HIT, TRAIN_N, VAL_LOSS, VAL_HIT, VAL_N, SAVE_NOW, FINITE = range(8)
SLOTS = 8


def autocast(kit: Kit) -> Any:
    p = kit.spec.recipe.optim.precision
    if p == "float32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if p == "bfloat16" else torch.float16
    return torch.autocast(kit.device.type, dtype=dtype)


def epoch_seed(spec: WorkerSpec, epoch: int, rank: int) -> int:
    """Every epoch's randomness (shuffle, dropout) depends only on (seed, epoch, rank), so a
    resumed run repeats exactly what an uninterrupted one would have done."""
    return spec.recipe.loop.seed * 1_000_003 + epoch * 7_919 + rank


def train_epoch(heads: WorkerHeads, data: Any, seed: int, sums: torch.Tensor,
                then: int | None = None) -> None:
    """One pass over the training part: micro-batches, accumulation, clipping, stepping
    (`then`: the next epoch's seed, so a streamed part can read ahead for it). Every head
    sees every batch; `sums` holds one row of slots per head."""
    lead, sums = heads.members[0], sums.view(-1, SLOTS)
    r, model = lead.spec.recipe, heads.runner()
    model.train()
    accum = r.optim.grad_accum
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    join = model.join() if ddp else contextlib.nullcontext()
    micro = rows = 0
    loss_sum, finite = sums[:, TRAIN_LOSS], sums[:, FINITE]  # views, taken once
    batches = data.batches(r.loop.batch_size, seed=seed, then=then)
    if any(p.objective.gathers for p in heads.members):
        batches = lockstep(batches, lead.device)  # every worker at every gathering step
    with join:
        for x, y in batches:
            x, y = x.to(lead.device, non_blocking=True), y.to(lead.device, non_blocking=True)
            micro += 1
            last = micro % accum == 0
            sync = contextlib.nullcontext() if (last or not ddp) else model.no_sync()
            with sync:
                with autocast(lead):
                    outs = heads.forward(x, training=True)
                total, values, hits = losses(heads, outs, y)
                lead.scaler.scale(total / accum if accum > 1 else total).backward()
            loss_sum.add_(values, alpha=len(y))  # one kernel: on a GPU each launch counts
            sums[:, TRAIN_HIT] += hits
            finite += loss_sum.isfinite()  # no sync: read once, after the epoch
            rows += len(y)
            if last:
                step(heads)
    sums[:, TRAIN_N] += rows
    if micro % accum:
        step(heads)  # the epoch's last, partial accumulation


def losses(heads: WorkerHeads, outs: Any, y: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(what to back-propagate, each head's loss [M], each head's hits [M]) of a batch."""
    if heads.stack is not None:
        return heads.stack.losses(outs.float(), y)
    if len(heads.members) == 1:  # views, where stacking would copy
        p = heads.members[0]
        loss, value = p.objective.loss(outs[0].float(), y)
        return loss, value.reshape(1), p.objective.hits(outs[0].detach().float(), y).reshape(1)
    total, values, hits = None, [], []
    for p, out in zip(heads.members, outs, strict=True):
        loss, value = p.objective.loss(out.float(), y)
        total = loss if total is None else total + loss
        values.append(value)
        hits.append(p.objective.hits(out.detach().float(), y))
    return total, torch.stack(values), torch.stack(hits)


def step(heads: WorkerHeads) -> None:
    """An optimizer step of every head still training (a stopped head's gradients dropped)."""
    lead = heads.members[0]
    if heads.stack is not None:  # one step for every member: a stopped one's is a no-op
        active = [not p.stopped for p in heads.progress]
        heads.stack.step(active)
        for kit, on in zip(heads.members, active, strict=True):
            if on:
                kit.schedule.step_batch()
    else:
        step_each(heads)
    lead.scaler.update()
    every = lead.spec.recipe.loop.empty_cache_every
    if every and lead.device.type == "cuda" and lead.schedule.step_no % every == 0:
        torch.cuda.empty_cache()


def step_each(heads: WorkerHeads) -> None:
    """Each head's own optimizer step, one after another."""
    lead = heads.members[0]
    for kit, progress in zip(heads.members, heads.progress, strict=True):
        if progress.stopped:
            kit.opt.zero_grad(set_to_none=True)
            continue
        r = kit.spec.recipe
        if r.optim.grad_clip > 0:
            lead.scaler.unscale_(kit.opt)
            params = [p for group in kit.opt.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, r.optim.grad_clip)
        lead.scaler.step(kit.opt)
        kit.opt.zero_grad(set_to_none=True)
        kit.schedule.step_batch()


def evaluate(heads: WorkerHeads, data: Any, sums: torch.Tensor) -> list[Evaluator]:
    """Validation loss and hits into `sums`, one row each head; the objective's metrics fed
    (computed later, when every worker is done, since computing them is a collective). One
    Evaluator per head (a Stack: one for all its heads, whose compute_each gives each
    head's)."""
    lead, rows = heads.members[0], sums.view(-1, SLOTS)
    heads.runner().eval()
    metrics = ([lead.objective.evaluator(members=len(heads.members))]
               if heads.stack is not None else [p.objective.evaluator() for p in heads.members])
    with torch.inference_mode():
        for x, y in data.batches(lead.spec.recipe.loop.batch_size * 4, seed=None):
            x, y = x.to(lead.device, non_blocking=True), y.to(lead.device, non_blocking=True)
            with autocast(lead):
                outs = heads.forward(x, training=False)
            if heads.stack is not None:
                outs = outs.float()
                loss, hits = heads.stack.eval_losses(outs, y), heads.stack.hits(outs, y)
                metrics[0].update(outs, y)
            else:
                values, counts = [], []
                for p, out, evaluator in zip(heads.members, outs, metrics, strict=True):
                    out = out.float()
                    values.append(p.objective.eval_loss(out, y))
                    counts.append(p.objective.hits(out, y))
                    evaluator.update(out, y)
                loss, hits = torch.stack(values), torch.stack(counts)
            rows[:, VAL_LOSS] += loss.double() * len(y)
            rows[:, VAL_HIT] += hits
            rows[:, VAL_N] += len(y)
    return metrics


def epoch_metrics(kit: Kit, s: list[float], epoch: int, seconds: float,
                  extra: dict[str, float] | None = None) -> dict[str, Any]:
    """The epoch's metrics: losses and accuracies from the summed slots, then the objective's
    (which may refine val_acc, e.g. as precision@1 over every worker's validation rows)."""
    return {
        "epoch": epoch + 1,
        "train_loss": s[TRAIN_LOSS] / max(s[TRAIN_N], 1),
        "train_acc": s[TRAIN_HIT] / max(s[TRAIN_N], 1),
        "val_loss": s[VAL_LOSS] / max(s[VAL_N], 1),
        "val_acc": s[VAL_HIT] / max(s[VAL_N], 1),
        "train_rows": int(s[TRAIN_N]),
        "val_rows": int(s[VAL_N]),
        "lr": kit.opt.param_groups[0]["lr"],
        "epoch_seconds": seconds,
        "rows_per_s": s[TRAIN_N] / max(seconds, 1e-9),
        "placement": kit.spec.placement,
        **(extra or {}),
    }
