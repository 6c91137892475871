"""The torch modules that heads/specs.py's builders assemble beyond nn.Sequential (imported on use,
so that reading a HeadSpec needs no torch)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Gated", "Normalized", "Skip", "Standardized", "standardized"]


class Gated(nn.Module):
    """(W x) * sigmoid(V x): a linear map whose every output channel is gated by the input."""

    def __init__(self, in_dim: int, out_dim: int, dropout: float):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.value = nn.Linear(in_dim, out_dim)
        self.gate = nn.Linear(in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(x)
        return self.value(x) * self.gate(x).sigmoid()


class Skip(nn.Module):
    """shortcut(x) + sigmoid(g) * branch(x): the identity shortcut where the widths agree, else
    a bias-free linear map; g starts at 0, the gate half open."""

    def __init__(self, in_dim: int, out_dim: int, branch: nn.Module):
        super().__init__()
        self.short = nn.Identity() if in_dim == out_dim else nn.Linear(in_dim, out_dim, bias=False)
        self.branch = branch
        self.gate = nn.Parameter(torch.zeros(out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.short(x) + self.gate.sigmoid() * self.branch(x)


class Normalized(nn.Module):
    """A head whose outputs have unit L2 norm on the last axis."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.inner(x), dim=-1)


class Standardized(nn.Module):
    """A head that reads its inputs standardised, (x - mean) / scale: the training rows'
    per-feature mean and standard deviation (1 where it is 0), buffers saved with the head, so
    that predict, export and serve need nothing else. They start as the identity (0, 1);
    training sets them (raycache._train.worker.input_stats)."""

    mean: torch.Tensor
    scale: torch.Tensor

    def __init__(self, inner: nn.Module, in_dim: int):
        super().__init__()
        self.inner = inner
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("scale", torch.ones(in_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner((x - self.mean) / self.scale)


def standardized(module: nn.Module) -> Standardized | None:
    """The Standardized layer of a head (inside a Normalized one too), else None."""
    if isinstance(module, Normalized):
        module = module.inner
    return module if isinstance(module, Standardized) else None
