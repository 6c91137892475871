"""Small deterministic torch encoders for tests: fixed-seed projections, importable by workers."""

import torch


def projection(in_dim: int = 8, out_dim: int = 16, seed: int = 0) -> torch.nn.Module:
    """A fixed random linear projection followed by tanh (same weights on every call)."""
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(in_dim, out_dim)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_dim, in_dim, generator=g) / in_dim**0.5)
        layer.bias.zero_()
    return torch.nn.Sequential(layer, torch.nn.Tanh())


def unseeded(in_dim: int = 8, out_dim: int = 16) -> torch.nn.Module:
    """Random weights on every call: a fill must refuse it rather than mix two models."""
    return torch.nn.Linear(in_dim, out_dim)


class _Slow(torch.nn.Module):
    """Sleeps before each forward pass, so a test can act while a fill is under way."""

    def __init__(self, inner: torch.nn.Module, delay: float):
        super().__init__()
        self.inner, self.delay = inner, delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        time.sleep(self.delay)
        return self.inner(x)


def slow_projection(in_dim: int = 8, out_dim: int = 16, delay: float = 0.5) -> torch.nn.Module:
    """projection() that takes `delay` seconds per forward pass."""
    return _Slow(projection(in_dim, out_dim), delay)
