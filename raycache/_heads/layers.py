"""A head's layers before its output layer (`penultimate`): what a classifier's last hidden
layer makes of its inputs, as vectors to export or serve beside its classes."""

from __future__ import annotations

import torch
from torch import nn

from raycache._heads.modules import Normalized, Standardized

__all__ = ["Penultimate", "penultimate"]


class Penultimate(nn.Module):
    """The layers of a head's chain before its last Linear, its inputs standardised first where
    the head standardises them."""

    def __init__(self, body: nn.Module, standard: Standardized | None):
        super().__init__()
        self.body, self.standard = body, standard

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.standard is not None:
            x = (x - self.standard.mean) / self.standard.scale
        return self.body(x)


def penultimate(model: nn.Module) -> Penultimate | None:
    """The layers of `model` before its last Linear (a linear head's: its inputs; an mlp's: its
    last hidden layer's output), or None where it is no chain of layers (gated, skip, a
    trainable encoder's model)."""
    inner = model.inner if isinstance(model, Normalized) else model
    standard = inner if isinstance(inner, Standardized) else None
    chain = standard.inner if standard is not None else inner
    if not isinstance(chain, nn.Sequential):
        return None
    last = [i for i, layer in enumerate(chain) if isinstance(layer, nn.Linear)]
    return Penultimate(chain[: last[-1]], standard) if last else None
