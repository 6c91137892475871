"""Trainable heads on cached embeddings, as a dict registry of builders."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn


def linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """A linear probe: one affine layer (dropout on its input when asked)."""
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(in_dim, out_dim))


def mlp(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> nn.Module:
    """Hidden layers of Linear, GELU and dropout, then a linear output."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.GELU(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


REGISTRY: dict[str, Callable[[int, int, list[int], float], nn.Module]] = {
    "linear": linear,
    "mlp": mlp,
}
