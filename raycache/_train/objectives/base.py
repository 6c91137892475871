"""What every objective provides: the loss of a batch, what counts as a hit, validation metrics,
and (per family) its config checks and the width of the head it trains."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import torch

    from raycache._cache.committed import Cache
    from raycache._train.config import TrainConfig
    from raycache._train.runspec import WorkerSpec

__all__ = ["EPOCH_METRICS", "Evaluator", "Family", "Objective"]

EPOCH_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "train_rows", "val_rows",
                 "lr", "epoch_seconds", "rows_per_s", "epoch")
"""The numbers every epoch reports whatever the objective (raycache._train.worker.epoch)."""


class Evaluator(Protocol):
    """Validation metrics of one epoch, fed batch by batch on every worker."""

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None: ...

    def compute(self) -> dict[str, float]:
        """Metrics over every worker's validation rows (a collective: every worker calls it,
        and every worker gets the same values), named val_*."""
        ...


class Objective(Protocol):
    """One training objective on one worker, built from the WorkerSpec."""

    criterion: torch.nn.Module
    """The loss with any learnable parts (ArcFace's class centres): optimised with the head,
    kept in state.pt, but not part of the saved head."""
    gathers: bool
    """The loss takes in-batch negatives from every worker (so batches run in lockstep)."""

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what to back-propagate, the batch's mean loss to report). Under DDP the first is
        scaled so that DDP's averaged gradient is the gradient of the global batch's loss."""
        ...

    def eval_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of a validation batch on this worker alone (no learning, no gathering)."""
        ...

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Rows of the batch counted right (the numerator of train_acc)."""
        ...

    def evaluator(self) -> Evaluator: ...


class Family(NamedTuple):
    """An objective family, a OBJECTIVES entry: cheap checks on the driver, the build on workers."""

    build: Callable[[WorkerSpec, torch.device], Objective]
    problems: Callable[[TrainConfig], list[str]]
    """Problems with the family's settings (names the value, what was expected, the fix)."""
    out_dim: Callable[[TrainConfig, int], int]
    """The head's output width, given the config and the label column's class count."""
    labels: str
    """What the label column must hold: "classes", "groups" (integer ids), or "none"."""
    data_sources: Callable[..., Any] | None = None
    """data_sources(spec, rank, device) -> (train, validation) data, where the objective reads
    other rows than the cache's (pairs); None: the cache's rows and labels."""
    metrics: Callable[[TrainConfig], tuple[str, ...]] = lambda cfg: ()
    """The validation metrics its evaluator may report with these settings (besides every
    objective's train_loss, train_acc, val_loss, val_acc...): what `evaluation.monitor` and a
    sweep's `select` may name, checked before any work."""
    data_problems: Callable[[TrainConfig, Cache], list[str]] | None = None
    """Problems with the data the objective reads besides the cache, checked against the cache
    on the driver before any work (pairs: keys missing from the cache); None: nothing to read."""
