"""A sweep's heads as one module: every head fed the same batch in one call, plain linear heads
as one matrix product (their weights side by side), MLP heads of the same shape as batched
matrix products layer by layer, so that DDP all-reduces all of them at once.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Members", "mlp_layers", "plain_linear"]


def plain_linear(module: nn.Module) -> nn.Linear | None:
    """The Linear of a `linear` head with no dropout (Dropout(0), Linear), else None."""
    if (isinstance(module, nn.Sequential) and len(module) == 2
            and isinstance(module[0], nn.Dropout) and module[0].p == 0
            and isinstance(module[1], nn.Linear)):
        return module[1]
    return None


def mlp_layers(module: nn.Module) -> tuple[list[nn.Linear], float] | None:
    """The Linears of an `mlp` head ((Linear, GELU, Dropout) x L, then Linear; L >= 1) and its
    dropout, else None."""
    if not (isinstance(module, nn.Sequential) and len(module) >= 4 and len(module) % 3 == 1
            and isinstance(module[-1], nn.Linear)):
        return None
    layers, drops = [], set()
    for i in range(0, len(module) - 1, 3):
        lin, act, drop = module[i], module[i + 1], module[i + 2]
        if not (isinstance(lin, nn.Linear) and type(act) is nn.GELU
                and act.approximate == "none" and isinstance(drop, nn.Dropout)):
            return None
        layers.append(lin)
        drops.add(drop.p)
    if any(lin.bias is None for lin in layers) or module[-1].bias is None or len(drops) != 1:
        return None
    return [*layers, module[-1]], drops.pop()


def _shape(module: nn.Module) -> tuple | None:
    found = mlp_layers(module)
    if found is None:
        return None
    layers, p = found
    return (*(tuple(lin.weight.shape) for lin in layers), p)


class Members(nn.Module):
    """N heads of the same output width; forward returns each head's output for one input."""

    def __init__(self, heads: list[nn.Module]):
        super().__init__()
        self.heads = nn.ModuleList(heads)
        layers = [plain_linear(h) for h in heads]
        self.stacked = [i for i, layer in enumerate(layers) if layer is not None]
        """Indices of the plain linear heads, run as one matrix product."""
        shapes: dict[tuple, list[int]] = {}
        for i, layer in enumerate(layers):
            shape = _shape(heads[i]) if layer is None else None
            if shape is not None:
                shapes.setdefault(shape, []).append(i)
        self.grouped = [group for group in shapes.values() if len(group) > 1]
        """Indices of MLP heads of one shape, each group run as batched products per layer."""
        done = {i for group in self.grouped for i in group}
        self.looped = [i for i, layer in enumerate(layers) if layer is None and i not in done]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor | None] = [None] * len(self.heads)
        if self.stacked:
            layers = [self.heads[i][1] for i in self.stacked]
            weight = torch.cat([layer.weight for layer in layers])
            bias = torch.cat([layer.bias for layer in layers])
            wide = F.linear(x, weight, bias)  # (..., n * width): one GEMM for all of them
            for i, out in zip(self.stacked, wide.chunk(len(layers), dim=-1), strict=True):
                outs[i] = out
        for group in self.grouped:
            for i, out in zip(group, self._mlps(x, group).unbind(-2), strict=True):
                outs[i] = out
        for i in self.looped:
            outs[i] = self.heads[i](x)
        return tuple(outs)  # type: ignore[arg-type]

    def _mlps(self, x: torch.Tensor, group: list[int]) -> torch.Tensor:
        """(..., M, out): MLP heads of one shape, each layer one batched product for all M
        (the first one GEMM, the input being shared)."""
        found = [mlp_layers(self.heads[i]) for i in group]
        p = found[0][1]  # type: ignore[index]
        lead, m = x.shape[:-1], len(group)
        h = x.reshape(-1, x.shape[-1])
        for j in range(len(found[0][0])):  # type: ignore[index]
            w = torch.stack([f[0][j].weight for f in found])  # type: ignore[index]
            b = torch.stack([f[0][j].bias for f in found])  # type: ignore[index]
            if j == 0:
                h = F.linear(h, w.flatten(0, 1), b.flatten()).unflatten(-1, (m, w.shape[1]))
                h = h.transpose(0, 1)  # (M, rows, hidden)
            else:
                h = torch.baddbmm(b[:, None, :], h, w.transpose(1, 2))
            if j < len(found[0][0]) - 1:  # type: ignore[index]
                h = F.dropout(F.gelu(h), p, self.training)
        return h.transpose(0, 1).reshape(*lead, m, h.shape[-1])
