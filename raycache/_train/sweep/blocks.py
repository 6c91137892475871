"""A stack's blocks: the members of one shape (plain linear, or MLP of the same widths, depth
and dropout, its inputs standardised or not) as stacked weights [M, out, in] that one call runs
for every member."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from raycache._heads.modules import Standardized
from raycache._train.sweep.members import mlp_layers, plain_linear

__all__ = ["Block", "StackedLinear", "StackedMLP", "block_key", "build_block", "layers_of"]


def block_key(module: nn.Module) -> tuple | None:
    """What members must share to run as one block (the kind, every layer's weight shape and
    the dropout); None: the head is neither a plain linear head nor an MLP (its inputs
    standardised or not)."""
    if isinstance(module, Standardized):
        inner = block_key(module.inner)
        return ("standardized", *inner[1:]) if inner is not None and inner[0] == "mlp" else None
    linear = plain_linear(module)
    if linear is not None:
        return ("linear", tuple(linear.weight.shape)) if linear.bias is not None else None
    found = mlp_layers(module)
    if found is None:
        return None
    layers, p = found
    return ("mlp", *(tuple(lin.weight.shape) for lin in layers), p)


def layers_of(module: nn.Module) -> list[nn.Linear]:
    """A stackable head's Linears, input side first."""
    if isinstance(module, Standardized):
        module = module.inner
    linear = plain_linear(module)
    if linear is not None:
        return [linear]
    found = mlp_layers(module)
    if found is None:
        raise ValueError(f"not a head a stack can hold: {module}")
    return found[0]


class Block(nn.Module):
    """M heads of one shape as stacked weights; forward(x [..., in]) -> [..., M, out]."""

    weights: nn.ParameterList
    biases: nn.ParameterList

    def __init__(self, heads: list[list[nn.Linear]]):
        super().__init__()
        depth = len(heads[0])
        self.weights = nn.ParameterList(
            [nn.Parameter(torch.stack([h[j].weight.detach() for h in heads])) for j in
             range(depth)])
        self.biases = nn.ParameterList(
            [nn.Parameter(torch.stack([h[j].bias.detach() for h in heads])) for j in
             range(depth)])

    def stacked(self) -> list[nn.Parameter]:
        """The block's parameters in its heads' own order (each layer's weight, then bias),
        each with the members along the first axis: what the stacked optimizer steps."""
        return [p for pair in zip(self.weights, self.biases, strict=True) for p in pair]

    def _first(self, x: torch.Tensor) -> torch.Tensor:
        """The first layer of every member: one matrix product (the input is shared)."""
        w, b = self.weights[0], self.biases[0]
        m, out, width = w.shape
        return F.linear(x, w.reshape(m * out, width), b.reshape(m * out)).unflatten(-1, (m, out))

    @torch.no_grad()
    def load_from(self, heads: list[list[nn.Linear]]) -> None:
        for i, layers in enumerate(heads):
            for j, layer in enumerate(layers):
                self.weights[j][i].copy_(layer.weight)
                self.biases[j][i].copy_(layer.bias)

    @torch.no_grad()
    def copy_to(self, heads: list[list[nn.Linear]]) -> None:
        for i, layers in enumerate(heads):
            for j, layer in enumerate(layers):
                layer.weight.copy_(self.weights[j][i])
                layer.bias.copy_(self.biases[j][i])


class StackedLinear(Block):
    """Plain linear heads: every member's logits in one matrix product."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._first(x)

    @property
    def weight(self) -> nn.Parameter:
        return self.weights[0]

    @property
    def bias(self) -> nn.Parameter:
        return self.biases[0]


class StackedMLP(Block):
    """MLP heads of one shape ((Linear, GELU, Dropout) x L, then Linear): the first layer one
    matrix product for every member, each later one a batched product over the members. With
    `standardized`, their inputs are standardised first, as each member's Standardized does
    (its members' mean and scale are alike: the same training rows set them)."""

    mean: torch.Tensor | None
    scale: torch.Tensor | None

    def __init__(self, heads: list[list[nn.Linear]], dropout: float,
                 standardized: bool = False):
        super().__init__(heads)
        self.dropout = dropout
        width = heads[0][0].weight.shape[1]
        self.register_buffer("mean", torch.zeros(width) if standardized else None)
        self.register_buffer("scale", torch.ones(width) if standardized else None)

    @torch.no_grad()
    def load_inputs(self, member: Standardized) -> None:
        """A member's mean and scale (every member's are alike)."""
        if self.mean is not None and self.scale is not None:
            self.mean.copy_(member.mean)
            self.scale.copy_(member.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mean is not None:
            x = (x - self.mean) / self.scale
        h = self._first(x)  # [..., M, hidden]
        for w, b in zip(self.weights[1:], self.biases[1:], strict=True):
            h = F.dropout(F.gelu(h), self.dropout, self.training)
            h = torch.einsum("...mi,moi->...mo", h, w) + b
        return h


def build_block(key: tuple, heads: list[list[nn.Linear]]) -> Block:
    """The block of members that share `key` (block_key), from their Linears."""
    if key[0] == "linear":
        return StackedLinear(heads)
    return StackedMLP(heads, key[-1], standardized=key[0] == "standardized")
