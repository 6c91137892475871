"""One optimizer step for every member of a stacked sweep: each parameter holds all members
along its first axis, and each member's lr, weight decay and momentum are tensors, so a step is
a few whole-tensor kernels however many members there are (torch's optimizers take one lr per
parameter group: N members would be N steps). Each update follows its torch optimizer's
arithmetic with torch's defaults (betas, eps, alpha), member by member; a member that is not
active this step keeps its weights and state exactly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["BUFFERS", "UPDATES", "Coefs", "MemberOptimizer", "StackedOptimizer"]

BETAS, ADAM_EPS = (0.9, 0.999), 1e-8
RMS_ALPHA, RMS_EPS = 0.99, 1e-8
ADAGRAD_EPS = 1e-10


@dataclass
class Coefs:
    """This step's per-member values, [M] float64 (numpy: a few microseconds for what would
    be a dozen tensor kernels): lr (0 where inactive), weight decay, momentum, on (1 active, 0
    not), step (steps taken, this one included)."""

    lr: np.ndarray
    wd: np.ndarray
    momentum: np.ndarray
    on: np.ndarray
    step: np.ndarray


Table = dict[str, Any]
"""An update's coefficients for this step, by name: [M] each (numpy), then each shaped to
broadcast over a parameter (tensors in its dtype)."""


def _adam_table(c: Coefs) -> Table:
    b1, b2 = BETAS
    step = np.maximum(c.step, 1)
    bc2 = np.sqrt(1 - b2 ** step)
    return {"decay": 1 - c.lr * c.wd, "wd": c.wd, "w1": c.on * (1 - b1),
            "keep2": 1 - c.on * (1 - b2), "w2": c.on * (1 - b2),
            "eps": ADAM_EPS * bc2, "size": c.lr / (1 - b1 ** step) * bc2}


def _adam(decoupled: bool) -> Callable[..., None]:
    def update(p: torch.Tensor, g: torch.Tensor, s: Table, k: Table) -> None:
        if decoupled:
            p.mul_(k["decay"])
        else:
            g = g.add(p * k["wd"])
        s["exp_avg"].lerp_(g, k["w1"])
        s["exp_avg_sq"].mul_(k["keep2"]).add_(g * g * k["w2"])
        # torch's m / (sqrt(v) / bc2 + eps) * size, as m * (size bc2) / (sqrt(v) + eps bc2)
        denom = s["exp_avg_sq"].sqrt().add_(k["eps"])
        p.addcdiv_(s["exp_avg"] * k["size"], denom, value=-1)
    return update


def _momentum_table(c: Coefs) -> Table:
    """sgd, rmsprop and adagrad: momentum (1 where inactive: the buffer kept), on, lr, weight
    decay, and rmsprop's square-average weights."""
    return {"keep": np.where(c.on > 0, c.momentum, 1.0), "momentum": c.momentum,
            "on": c.on, "lr": c.lr, "wd": c.wd, "keep2": 1 - c.on * (1 - RMS_ALPHA),
            "w2": c.on * (1 - RMS_ALPHA)}


def _sgd(nesterov: bool) -> Callable[..., None]:
    def update(p: torch.Tensor, g: torch.Tensor, s: Table, k: Table) -> None:
        g = g.add(p * k["wd"])
        buf = s["momentum_buffer"]  # momentum 0: buf is this step's gradient
        buf.mul_(k["keep"]).add_(g * k["on"])
        g = g.add(buf * k["momentum"]) if nesterov else buf
        p.addcmul_(g, k["lr"], value=-1)
    return update


def _rmsprop(p: torch.Tensor, g: torch.Tensor, s: Table, k: Table) -> None:
    g = g.add(p * k["wd"])
    s["square_avg"].mul_(k["keep2"]).add_(g * g * k["w2"])
    avg = s["square_avg"].sqrt().add_(RMS_EPS)
    buf = s["momentum_buffer"]  # momentum 0: buf is this step's grad / avg
    buf.mul_(k["keep"]).add_(g / avg * k["on"])
    p.addcmul_(buf, k["lr"], value=-1)


def _adagrad(p: torch.Tensor, g: torch.Tensor, s: Table, k: Table) -> None:
    g = g.add(p * k["wd"])
    s["sum"].add_(g * g * k["on"])
    p.addcmul_(g / s["sum"].sqrt().add_(ADAGRAD_EPS), k["lr"], value=-1)


UPDATES: dict[str, Callable[[Any], tuple[Callable[[Coefs], Table], Callable[..., None]]]] = {
    "adamw": lambda r: (_adam_table, _adam(decoupled=True)),
    "adam": lambda r: (_adam_table, _adam(decoupled=False)),
    "sgd": lambda r: (_momentum_table, _sgd(r.optim.nesterov)),
    "rmsprop": lambda r: (_momentum_table, _rmsprop),
    "adagrad": lambda r: (_momentum_table, _adagrad),
}
"""optimizer name -> builder(recipe) of (its coefficient table of a step's Coefs,
update(param, grad, state, table shaped to the param))."""
BUFFERS: dict[str, tuple[str, ...]] = {
    "adamw": ("exp_avg", "exp_avg_sq"), "adam": ("exp_avg", "exp_avg_sq"),
    "sgd": ("momentum_buffer",), "rmsprop": ("square_avg", "momentum_buffer"),
    "adagrad": ("sum",),
}
"""Each optimizer's state per parameter, under torch's names."""


class StackedOptimizer:
    """The optimizer of stacked parameters ([M, ...] each), one member per recipe."""

    def __init__(self, params: list[torch.Tensor], recipes: list[Any]):
        names = {r.optim.optimizer for r in recipes}
        if len(names) != 1 or next(iter(names)) not in UPDATES:
            raise ValueError(f"a stacked sweep needs one optimizer of {sorted(UPDATES)} shared "
                             f"by every member; got {sorted(names)}")
        self.name = recipes[0].optim.optimizer
        self.params = params
        self.table, self.update = UPDATES[self.name](recipes[0])
        self.wd = np.array([r.optim.weight_decay for r in recipes], dtype=np.float64)
        self.momentum = np.array([r.optim.momentum for r in recipes], dtype=np.float64)
        self.steps = np.zeros(len(recipes), dtype=np.float64)
        self.state = [{k: torch.zeros_like(p) for k in BUFFERS[self.name]} for p in params]
        self.members = [MemberOptimizer(self, i, r) for i, r in enumerate(recipes)]

    @torch.no_grad()
    def step(self, active: list[bool]) -> None:
        """Update the active members (their lr as their MemberOptimizer's param_groups say)."""
        on = np.array(active, dtype=np.float64)
        lr = np.array([m.param_groups[0]["lr"] for m in self.members], dtype=np.float64)
        self.steps += on
        table = self.table(Coefs(lr * on, self.wd, self.momentum, on, self.steps))
        p0 = self.params[0]
        rows = torch.from_numpy(np.stack(list(table.values()))).to(p0.device, p0.dtype)
        for p, s in zip(self.params, self.state, strict=True):
            if p.grad is not None:
                shaped = rows.view(len(table), -1, *([1] * (p.dim() - 1)))
                self.update(p, p.grad, s, dict(zip(table, shaped, strict=True)))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class MemberOptimizer:
    """Member i's slice of a StackedOptimizer, with what the loop and its Schedule use of a
    torch optimizer: param_groups (its lr), and a state_dict in torch's layout (state per
    parameter index under torch's buffer names, then param_groups)."""

    def __init__(self, stack: StackedOptimizer, i: int, recipe: Any):
        self.stack, self.i = stack, i
        self.param_groups = [{"lr": recipe.optim.lr, "weight_decay": recipe.optim.weight_decay,
                              "momentum": recipe.optim.momentum,
                              "params": list(range(len(stack.params)))}]

    def state_dict(self) -> dict[str, Any]:
        step = {} if self.stack.name == "sgd" else {
            "step": torch.tensor(float(self.stack.steps[self.i]))}
        return {"state": {j: {**step, **{k: v[self.i].clone() for k, v in s.items()}}
                          for j, s in enumerate(self.stack.state)},
                "param_groups": [dict(self.param_groups[0])]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a state saved by state_dict (or by the torch optimizer of the same name over
        the member's head; buffers it lacks stay zero, as before a first step)."""
        for j, buffers in enumerate(self.stack.state):
            saved = state["state"].get(j, {})
            for k, v in buffers.items():
                if saved.get(k) is not None:
                    v[self.i].copy_(saved[k])
            if j == 0 and "step" in saved:
                self.stack.steps[self.i] = float(saved["step"])
        self.param_groups[0]["lr"] = state["param_groups"][0]["lr"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: the stack's gradients are dropped once for every member, after its step."""
