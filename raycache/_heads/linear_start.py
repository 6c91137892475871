"""An mlp that starts as the linear head: a linear classifier's solution written into its
weights, so that before its first step it predicts exactly what that linear head predicts.

GELU(z) - GELU(-z) = z for every z (z Phi(z) + z Phi(-z)). The first hidden layer's first 2K
units (K classes) hold the solution's logits u and their negatives -u; each later hidden layer
passes them on (its first K units read h[:K] - h[K:2K] = u, the next K the negatives); the
output layer reads u from them and nothing else (every other weight of it, and its bias, 0).
The other hidden units keep their random start: their output weights begin at 0, so they can
only add to the linear solution as training moves them. It needs every hidden width >= 2K."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["LINEAR_START", "place_linear", "starts_linear"]

LINEAR_START = frozenset({"mlp"})
"""Head families that start as the solved linear head (HeadSpec.linear_start)."""


def starts_linear(family: str, objective: str, classes: int, hidden: tuple[int, ...] | list[int],
                  trainable: bool = False) -> bool:
    """Whether a new head starts as the linear head: a classifier of LINEAR_START on frozen
    features, each hidden width at least twice its classes."""
    return (family in LINEAR_START and objective == "classification" and not trainable
            and classes > 0 and bool(hidden) and all(h >= 2 * classes for h in hidden))


def place_linear(module: nn.Module, w: torch.Tensor, b: torch.Tensor) -> None:
    """Write the linear solution w [D, K], b [K] (for the raw inputs) into an mlp head (its
    inputs standardised or not), as the module docstring says.

    Raises:
        ValueError: The module is no chain of Linear layers, or a hidden width is under 2K.
    """
    import torch
    from torch import nn

    from raycache._heads.modules import standardized

    std = standardized(module)
    chain = std.inner if std is not None else module
    linears = [m for m in chain.modules() if isinstance(m, nn.Linear)]
    k = w.shape[1]
    if len(linears) < 2 or any(lin.out_features < 2 * k for lin in linears[:-1]):
        raise ValueError(f"an mlp with hidden widths >= {2 * k} starts as a linear head of "
                         f"{k} classes; this one has "
                         f"{[lin.out_features for lin in linears[:-1]]}")
    w, b = w.to(linears[0].weight), b.to(linears[0].weight)
    if std is not None:  # the head reads (x - mean) / scale: the same logits from those
        b = b + std.mean.to(w) @ w
        w = w * std.scale.to(w)[:, None]
    eye = torch.eye(k, dtype=w.dtype, device=w.device)
    both = torch.cat([eye, -eye], 1)  # [K, 2K]: u from (GELU(u), GELU(-u))
    with torch.no_grad():
        first = linears[0]
        first.weight[:k].copy_(w.T)
        first.weight[k:2 * k].copy_(-w.T)
        first.bias[:k].copy_(b)
        first.bias[k:2 * k].copy_(-b)
        for layer in linears[1:-1]:
            layer.weight[:2 * k].zero_()
            layer.bias[:2 * k].zero_()
            layer.weight[:k, :2 * k].copy_(both)
            layer.weight[k:2 * k, :2 * k].copy_(-both)
        last = linears[-1]
        last.weight.zero_()
        last.bias.zero_()
        last.weight[:, :2 * k].copy_(both)
