"""How a text model's token states become one vector: the poolings sentence-transformers
models declare (their 1_Pooling/config.json), as a registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["POOLINGS"]

Pool = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9)


def mean_sqrt_len(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9).sqrt()


def cls(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden[:, 0]


def max_(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return hidden.masked_fill(~mask.bool().unsqueeze(-1), -1e9).max(1).values


def last_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    import torch

    last = mask.long().sum(1).clamp(min=1) - 1  # right-padded rows: the last real token
    return hidden[torch.arange(len(hidden), device=hidden.device), last]


POOLINGS: dict[str, Pool] = {
    "mean": mean, "cls": cls, "max": max_, "lasttoken": last_token,
    "mean_sqrt_len": mean_sqrt_len,
}
