"""A sweep's heads as one stack: its members grouped into blocks of one shape (plain linear
heads, MLP heads of the same widths), each block's weights stacked [M, out, in], so that one
call gives every member's logits, one batched loss their losses, and one vectorised step per
block (stack_optim) their updates: a training step's kernel count does not grow with the
number of members."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from raycache._heads.modules import Standardized
from raycache._train.sweep.blocks import Block, StackedMLP, block_key, build_block, layers_of
from raycache._train.sweep.stack_optim import UPDATES, MemberOptimizer, StackedOptimizer

__all__ = ["Stack", "Stacked", "stackable"]


def stackable(bases: list[nn.Module], recipes: list[Any], learnable: bool) -> bool:
    """Whether these heads train as one stack: every one a plain linear classifier (no
    dropout) or an MLP, with no learnable loss parts, an optimizer the stack implements, no
    float16 loss scaling."""
    return (all(block_key(b) is not None for b in bases)
            and not learnable
            and all(r.objective == "classification" and r.optim.precision != "float16"
                    and r.optim.optimizer in UPDATES for r in recipes))


class Stacked(nn.Module):
    """Every block of a stack in one module: forward(x [..., in]) -> [..., M, out], the
    members in the sweep's order."""

    def __init__(self, blocks: list[Block], order: list[int]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        back = torch.empty(len(order), dtype=torch.long)
        back[torch.tensor(order)] = torch.arange(len(order))
        self.back: torch.Tensor | None
        self.register_buffer("back", None if order == sorted(order) else back,
                             persistent=False)
        """Where each member's output lies among the blocks' (None: in order already)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [block(x) for block in self.blocks]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)
        return out if self.back is None else out.index_select(-2, self.back)


class Stack:
    """The heads of a stackable sweep trained as one: the stacked module (what the step
    calls), one stacked optimizer per block (members: each member's MemberOptimizer view, for
    its Schedule and checkpoint, in the sweep's order), and each member's own head module,
    kept in step with the stack by pull and push."""

    def __init__(self, bases: list[nn.Module], recipes: list[Any],
                 class_weights: tuple[float, ...] | None):
        groups: dict[tuple, list[int]] = {}
        for i, (base, r) in enumerate(zip(bases, recipes, strict=True)):
            groups.setdefault((block_key(base), r.optim.optimizer), []).append(i)
        self.groups = list(groups.values())
        """Each block's members (indices into the sweep), in block order."""
        self.heads = [layers_of(base) for base in bases]
        self.inputs = [base if isinstance(base, Standardized) else None for base in bases]
        """Each member's input standardisation (None: it reads its inputs as they are)."""
        device = self.heads[0][0].weight.device
        blocks = [build_block(key, [self.heads[i] for i in group])
                  for (key, _), group in groups.items()]
        self.module = Stacked(blocks, [i for group in self.groups for i in group]).to(device)
        self.opts = [StackedOptimizer(block.stacked(), [recipes[i] for i in group])
                     for block, group in zip(blocks, self.groups, strict=True)]
        self.members: list[MemberOptimizer] = [None] * len(bases)  # type: ignore[list-item]
        for group, opt in zip(self.groups, self.opts, strict=True):
            for i, view in zip(group, opt.members, strict=True):
                self.members[i] = view
        self.smoothing = torch.tensor([r.loss.label_smoothing for r in recipes], device=device)
        self.smooth = any(r.loss.label_smoothing > 0 for r in recipes)
        self.class_weights = (torch.tensor(class_weights, dtype=torch.float32, device=device)
                              if class_weights else None)
        self.clips = [torch.tensor([recipes[i].optim.grad_clip for i in group],
                                   dtype=torch.float32, device=device)
                      for group in self.groups]
        """Each block's members' grad_clip (0: none)."""

    def push(self) -> None:
        """Members' heads -> the stack (after they were loaded from a checkpoint, or their
        inputs' mean and scale set)."""
        for block, group in zip(self.module.blocks, self.groups, strict=True):
            block.load_from([self.heads[i] for i in group])
            first = self.inputs[group[0]]
            if isinstance(block, StackedMLP) and first is not None:
                block.load_inputs(first)

    def pull(self) -> None:
        """The stack -> members' heads (before their weights are kept or saved)."""
        for block, group in zip(self.module.blocks, self.groups, strict=True):
            block.copy_to([self.heads[i] for i in group])

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
        """Per block: clip each member's gradient norm (as clip_grad_norm_ would over its
        head), step the active members, drop the gradients."""
        for group, opt, clip in zip(self.groups, self.opts, self.clips, strict=True):
            grads = [p.grad for p in opt.params if p.grad is not None]
            if grads and bool((clip > 0).any()):
                norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads], 1).norm(dim=1)
                scale = torch.where(clip > 0, (clip / (norms + 1e-6)).clamp(max=1.0), 1.0)
                for g in grads:
                    g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
            opt.step([active[i] for i in group])
            opt.zero_grad()
