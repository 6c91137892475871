"""A sweep of plain linear classifiers as one stacked weight [M, out, in]: one product gives
every member's logits, one batched loss their losses, one vectorised step (stack_optim) their
updates, so a training step's kernel count does not grow with the number of members."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from raycache._train.sweep.members import plain_linear
from raycache._train.sweep.stack_optim import UPDATES, StackedOptimizer

__all__ = ["Stack", "StackedLinear", "stackable"]


def stackable(bases: list[nn.Module], recipes: list[Any], learnable: bool) -> bool:
    """Whether these heads train as one stack: every one a plain linear classifier (no
    dropout) with no learnable loss parts, one optimizer the stack implements, no float16
    loss scaling."""
    return (all(plain_linear(b) is not None for b in bases)
            and not learnable
            and all(r.objective == "classification" and r.optim.precision != "float16"
                    for r in recipes)
            and len({r.optim.optimizer for r in recipes}) == 1
            and recipes[0].optim.optimizer in UPDATES)


class StackedLinear(nn.Module):
    """M linear layers of the same shape as one weight [M, out, in] and bias [M, out];
    forward(x [..., in]) -> [..., M, out], with one matrix product."""

    def __init__(self, layers: list[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([layer.weight.detach() for layer in layers]))
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, out, width = self.weight.shape
        wide = F.linear(x, self.weight.reshape(m * out, width), self.bias.reshape(m * out))
        return wide.unflatten(-1, (m, out))

    @torch.no_grad()
    def load_from(self, layers: list[nn.Linear]) -> None:
        for i, layer in enumerate(layers):
            self.weight[i].copy_(layer.weight)
            self.bias[i].copy_(layer.bias)

    @torch.no_grad()
    def copy_to(self, layers: list[nn.Linear]) -> None:
        for i, layer in enumerate(layers):
            layer.weight.copy_(self.weight[i])
            layer.bias.copy_(self.bias[i])


class Stack:
    """The heads of a stackable sweep trained as one: the stacked module (what the step
    calls), its optimizer (MemberOptimizer views for each member's Schedule and checkpoint),
    and each member's own head module, kept in step with the stack by pull and push."""

    def __init__(self, bases: list[nn.Module], recipes: list[Any],
                 class_weights: tuple[float, ...] | None):
        self.layers = [plain_linear(b) for b in bases]
        self.module = StackedLinear(self.layers)
        device = self.module.weight.device
        self.opt = StackedOptimizer([self.module.weight, self.module.bias], recipes)
        self.smoothing = torch.tensor([r.loss.label_smoothing for r in recipes], device=device)
        self.smooth = any(r.loss.label_smoothing > 0 for r in recipes)
        self.class_weights = (torch.tensor(class_weights, dtype=torch.float32, device=device)
                              if class_weights else None)
        self.clip = recipes[0].optim.grad_clip

    def push(self) -> None:
        """Members' heads -> the stack (after they were loaded from a checkpoint)."""
        self.module.load_from(self.layers)

    def pull(self) -> None:
        """The stack -> members' heads (before their weights are kept or saved)."""
        self.module.copy_to(self.layers)

    def losses(self, out: torch.Tensor, y: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the sum to back-propagate, each member's loss [M], each member's hits [M]) of
        logits [B, M, C]: torch's cross-entropy (class weights, each member's label
        smoothing) for every member at once."""
        logp = out.log_softmax(-1)
        picked = logp.gather(-1, y.view(-1, 1, 1).expand(-1, out.shape[1], 1)).squeeze(-1)
        w = self.class_weights
        if w is None:
            loss = -picked.mean(0)
        else:  # torch's weighted mean: sum of w[y] * loss over sum of w[y]
            wy = w[y]
            loss = -(picked * wy[:, None]).sum(0) / wy.sum()
        if self.smooth:
            spread = (logp * w).sum(-1).sum(0) / w[y].sum() if w is not None else \
                logp.sum(-1).mean(0)
            loss = (1 - self.smoothing) * loss - self.smoothing / out.shape[-1] * spread
        return loss.sum(), loss.detach(), self.hits(out.detach(), y)

    @staticmethod
    def hits(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's right rows [M] of logits [B, M, C]."""
        return (out.argmax(-1) == y[:, None]).sum(0)

    @staticmethod
    def eval_losses(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's plain mean cross-entropy [M] (no weights, no smoothing)."""
        picked = out.log_softmax(-1).gather(-1, y.view(-1, 1, 1).expand(-1, out.shape[1], 1))
        return -picked.squeeze(-1).mean(0)

    def step(self, active: list[bool]) -> None:
        """Clip each member's gradient norm (as clip_grad_norm_ would over its head), step
        the active members, drop the gradients."""
        if self.clip > 0:
            w, b = self.module.weight.grad, self.module.bias.grad
            if w is not None and b is not None:
                norms = torch.stack([w.flatten(1).norm(dim=1), b.norm(dim=1)], 1).norm(dim=1)
                scale = (self.clip / (norms + 1e-6)).clamp(max=1.0)
                w.mul_(scale[:, None, None])
                b.mul_(scale[:, None])
        self.opt.step(active)
        self.opt.zero_grad()
