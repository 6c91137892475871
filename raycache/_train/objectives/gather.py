"""Negatives across DDP workers: an all-gather that keeps gradients for this worker's rows and
takes batches of unequal size, and a lockstep that stops every worker at the same step.

Hand-written because pytorch-metric-learning's gather (in DistributedLossWrapper) needs the same
batch size on every worker (an epoch's last batches differ) and puts this worker's rows first,
so its loss is not the single-process loss of the same global batch; this one keeps rank order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import torch
import torch.distributed as dist

__all__ = ["all_gather", "distributed", "gathered_loss", "lockstep", "world"]

T = TypeVar("T")


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world() -> int:
    return dist.get_world_size() if distributed() else 1


def all_gather(x: torch.Tensor) -> torch.Tensor:
    """Every worker's x, concatenated in rank order along dim 0; gradients flow back into this
    worker's own rows (the others are constants here: their own workers back-propagate them)."""
    if not distributed():
        return x
    n = dist.get_world_size()
    size = torch.tensor([x.shape[0]], device=x.device)
    sizes = [torch.zeros_like(size) for _ in range(n)]
    dist.all_gather(sizes, size)
    rows = [int(s) for s in sizes]
    padded = torch.zeros((max(rows), *x.shape[1:]), dtype=x.dtype, device=x.device)
    padded[: x.shape[0]] = x.detach()
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded.contiguous())
    out = [p[:r] for p, r in zip(parts, rows, strict=True)]
    out[dist.get_rank()] = x
    return torch.cat(out)


def gathered_loss(batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  out: torch.Tensor, y: torch.Tensor, gathers: bool
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(what to back-propagate, the batch's loss to report) of an in-batch-negatives loss: over
    every worker's rows when `gathers` under DDP, scaled by the world size so that DDP's
    averaged gradient is the gradient of the global batch's loss."""
    if gathers and distributed():
        value = batch_loss(all_gather(out), all_gather(y))
        return value * world(), value.detach()
    value = batch_loss(out, y)
    return value, value.detach()


def lockstep(batches: Iterator[T], device: torch.device) -> Iterator[T]:
    """The batches, until any worker runs out: a loss that gathers needs every worker at every
    step (a worker's surplus batches are skipped; the next epoch's shuffle covers them)."""
    if not distributed():
        yield from batches
        return
    flag = torch.zeros(1, device=device)
    for batch in batches:
        flag.fill_(1.0)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if flag.item() == 0:
            return
        yield batch
    flag.fill_(0.0)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
