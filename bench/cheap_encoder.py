"""A cheap deterministic encoder for the scale bench: a fixed 16 -> 384 projection and tanh, so
that the framework's own per-row costs, not the model, set the speed."""

from __future__ import annotations

import torch

IN, OUT = 16, 384


def projection(seed: int = 0) -> torch.nn.Module:
    """The same weights for the same seed, on every process."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, OUT), torch.nn.Tanh())
