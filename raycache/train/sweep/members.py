"""A sweep's heads as one module: every head fed the same batch in one call, plain linear heads
as one matrix product (their weights side by side), so that DDP all-reduces all of them at once.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Members", "plain_linear"]


def plain_linear(module: nn.Module) -> nn.Linear | None:
    """The Linear of a `linear` head with no dropout (Dropout(0), Linear), else None."""
    if (isinstance(module, nn.Sequential) and len(module) == 2
            and isinstance(module[0], nn.Dropout) and module[0].p == 0
            and isinstance(module[1], nn.Linear)):
        return module[1]
    return None


class Members(nn.Module):
    """N heads of the same output width; forward returns each head's output for one input."""

    def __init__(self, heads: list[nn.Module]):
        super().__init__()
        self.heads = nn.ModuleList(heads)
        layers = [plain_linear(h) for h in heads]
        self.stacked = [i for i, layer in enumerate(layers) if layer is not None]
        """Indices of the plain linear heads, run as one matrix product."""
        self.looped = [i for i, layer in enumerate(layers) if layer is None]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor | None] = [None] * len(self.heads)
        if self.stacked:
            layers = [self.heads[i][1] for i in self.stacked]
            weight = torch.cat([layer.weight for layer in layers])
            bias = torch.cat([layer.bias for layer in layers])
            wide = F.linear(x, weight, bias)  # (..., n * width): one GEMM for all of them
            for i, out in zip(self.stacked, wide.chunk(len(layers), dim=-1), strict=True):
                outs[i] = out
        for i in self.looped:
            outs[i] = self.heads[i](x)
        return tuple(outs)  # type: ignore[arg-type]
