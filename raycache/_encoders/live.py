"""Encoders as trainable torch modules (imported on use): what training runs beside the cache."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Flatten", "Pooled"]


class Flatten(nn.Module):
    """A user module whose output is flattened to (n, dim)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        return out.reshape(out.shape[0], -1)


class Pooled(nn.Module):
    """A transformer over token ids padded with -1: pooled over the real tokens (a function of
    raycache._encoders.pooling), optionally L2-normalised (what the hf-text family caches, but
    with gradients)."""

    def __init__(self, model: nn.Module, pool: Callable, normalize: bool):
        super().__init__()
        self.model, self.pool, self.normalize = model, pool, normalize

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids >= 0
        width = max(int(mask.sum(1).max()), 1) if len(ids) else 1
        ids, mask = ids[:, :width].clamp(min=0).long(), mask[:, :width]
        hidden = self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        pooled = self.pool(hidden, mask)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled
