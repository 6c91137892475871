"""Heads for tests, importable by Ray Train workers ("toy_heads:slow_linear")."""

import time

import torch

DELAY_S = 0.02
"""Seconds each forward pass sleeps: slow enough to kill a process between two checkpoints."""


class Sleep(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(DELAY_S)
        return x


def slow_linear(in_dim: int, out_dim: int, hidden: list[int], dropout: float) -> torch.nn.Module:
    """A linear head whose every forward pass takes DELAY_S longer."""
    return torch.nn.Sequential(torch.nn.Linear(in_dim, out_dim), Sleep())
