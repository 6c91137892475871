"""What one worker trains: each head's kit and progress, and a sweep's shared module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from raycache._train.objectives import Objective
from raycache._train.optim import Schedule
from raycache._train.runspec import WorkerSpec
from raycache._train.sweep.members import Members
from raycache._train.sweep.stack import Stack

__all__ = ["Kit", "Progress", "WorkerHeads", "Trained"]


@dataclass
class Progress:
    """What survives a restart besides the weights: epoch, early stopping, history."""

    epoch: int = 0
    best: float | None = None
    best_epoch: int = 0
    bad_epochs: int = 0
    stopped: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)
    diverged: str = ""
    """Where and how a sweep member's loss became NaN or infinite (it stopped there, its
    learning rate set to 0, while the other members went on); empty: it did not."""


@dataclass
class Kit:
    """A head's kit: the objects its training step needs (model, optimizer, schedule), built
    once per worker."""

    spec: WorkerSpec
    base: torch.nn.Module
    """The head itself, or the Joint of the trainable encoders and the head (raycache._heads.joint);
    its state_dict is what gets saved."""
    model: torch.nn.Module
    """What the step calls: the head (with the loss's learnable parts, when it has any), maybe
    DDP-wrapped and compiled."""
    opt: torch.optim.Optimizer
    schedule: Schedule
    scaler: torch.amp.GradScaler
    objective: Objective
    device: torch.device
    best_weights: dict[str, torch.Tensor] | None = None


@dataclass
class WorkerHeads:
    """Every head the run trains (one, or a sweep's members) on the same batches: each one's
    kit and progress, the run's own progress, and, for a sweep, the module that runs all its
    heads in one call."""

    spec: WorkerSpec
    members: list[Kit]
    progress: list[Progress]
    run: Progress
    """The one head's progress; a sweep's: its epochs and its leading member's metrics."""
    base: Members | None = None
    """A sweep's heads as one module; None for a single head (its kit.model runs it)."""
    model: Any = None
    """What a sweep's training step calls: `base`, maybe DDP-wrapped and compiled."""
    leader: int = 0
    """The member best by the run's select metric so far."""
    stack: Stack | None = None
    """A stackable sweep's heads as one (then `base` is its module); None otherwise."""

    @classmethod
    def of(cls, kit: Kit) -> WorkerHeads:
        """One head alone."""
        progress = Progress()
        return cls(kit.spec, [kit], [progress], progress)

    def runner(self) -> Any:
        """The module the training step calls."""
        return self.members[0].model if self.base is None else self.model

    def forward(self, x: torch.Tensor, training: bool) -> Any:
        """Every head's output for the batch x: a tuple, or a Stack's [B, M, out] tensor."""
        if self.base is None:
            p = self.members[0]
            return ((p.model if training else p.base)(x),)
        return (self.model if training else self.base)(x)


class Trained(torch.nn.Module):
    """The head and the loss's learnable parts as one module, so that DDP averages the
    gradients of both; it computes what the head computes."""

    def __init__(self, head: torch.nn.Module, criterion: torch.nn.Module):
        super().__init__()
        self.head, self.criterion = head, criterion

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)
