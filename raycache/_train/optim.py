"""Optimizers and learning-rate schedules, as dict registries keyed by their config names."""

from __future__ import annotations

import functools
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.optim.optimizer as torch_optim

__all__ = ["FUSED", "OPTIMIZERS", "SCHEDULES", "Schedule", "build_optimizer", "eager"]

Params = Iterable[torch.nn.Parameter]

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adamw": lambda p, o, **kw: torch.optim.AdamW(p, lr=o.lr, weight_decay=o.weight_decay, **kw),
    "adam": lambda p, o, **kw: torch.optim.Adam(p, lr=o.lr, weight_decay=o.weight_decay, **kw),
    "sgd": lambda p, o, **kw: torch.optim.SGD(p, lr=o.lr, momentum=o.momentum,
                                              nesterov=o.nesterov, weight_decay=o.weight_decay,
                                              **kw),
    "rmsprop": lambda p, o, **kw: torch.optim.RMSprop(p, lr=o.lr, momentum=o.momentum,
                                                      weight_decay=o.weight_decay, **kw),
    "adagrad": lambda p, o, **kw: torch.optim.Adagrad(p, lr=o.lr, weight_decay=o.weight_decay,
                                                      **kw),
}
"""name -> builder(params, recipe, **torch options) where recipe has lr, weight_decay,
momentum, nesterov."""
FUSED = ("adamw", "adam", "sgd", "adagrad")
"""Optimizers with a fused implementation (one kernel per step, CPU and GPU)."""


def build_optimizer(params: Params, recipe: Any, fused: bool = False) -> torch.optim.Optimizer:
    """The recipe's optimizer; `fused`: its fused implementation where it has one (a sweep's
    many small heads step at a fraction of the per-tensor implementation's overhead)."""
    if recipe.optim.nesterov and recipe.optim.optimizer == "sgd" and recipe.optim.momentum <= 0:
        raise ValueError("nesterov: true needs momentum > 0 (got momentum="
                         f"{recipe.optim.momentum}); "
                         "set momentum: 0.9, or nesterov: false")
    options = {"fused": True} if fused and recipe.optim.optimizer in FUSED else {}
    _without_dynamo()
    return eager(OPTIMIZERS[recipe.optim.optimizer](params, recipe.optim, **options))


# torch's optimizers import torch._dynamo (about 1 s here, more than torch itself) in their
# constructor and at every step, only to keep dynamo from tracing them in a compiled region;
# raycache never compiles an optimizer. While nothing else has imported torch._dynamo (then
# nothing can be tracing), they run without it; once something has (torch.compile), torch's own
# paths run. tests/test_warm_start.py pins the steps bit for bit to torch's.
_DISABLED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
"""torch.optim.Optimizer's methods under torch._disable_dynamo, which imports torch._dynamo at
the first call and caches its disabled function as the wrapped function's __dynamo_disable."""


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


@functools.cache
def _without_dynamo() -> None:
    """Give _DISABLED the function torch would cache, deferring to torch's own once dynamo is
    loaded."""
    for name in _DISABLED:
        outer = getattr(torch.optim.Optimizer, name)
        fn = getattr(outer, "__wrapped__", None)
        if fn is None or getattr(fn, "__dynamo_disable", None) is not None:
            continue  # another torch, or it ran already: torch's own path

        def until_dynamo(*args: Any, _fn: Any = fn, _outer: Any = outer, **kwargs: Any) -> Any:
            if _dynamo_loaded():
                del _fn.__dynamo_disable  # torch's wrapper caches its disabled function
                return _outer(*args, **kwargs)
            return _fn(*args, **kwargs)

        fn.__dynamo_disable = until_dynamo


def eager(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """`opt`, whose step runs the optimizer's own update with gradients off (unless it is
    differentiable), as torch's step does, but without the wrapper that imports torch._dynamo
    to mark graph breaks around it; torch's own step where step hooks are registered."""
    if _update(type(opt)) is not None:
        opt.step = types.MethodType(_eager_step, opt)  # a copy of opt steps the copy
    return opt


@functools.cache
def _update(cls: type) -> Callable[..., Any] | None:
    """The optimizer class's step under torch's wrappers (None: another torch, no wrapper)."""
    step = inspect.unwrap(cls.step)
    return None if step is cls.step or step.__name__ != "step" else step


def _eager_step(opt: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
    hooks = (opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks
             or torch_optim._global_optimizer_pre_hooks
             or torch_optim._global_optimizer_post_hooks)
    if _dynamo_loaded() or hooks:
        return type(opt).step(opt, closure)
    with torch.set_grad_enabled(opt.defaults.get("differentiable", False)):
        return _update(type(opt))(opt, closure)


# Multipliers of the peak LR at optimizer step `t` of `total` (after warmup), per schedule.
def _constant(t: int, total: int, r: Any, spe: int) -> float:
    return 1.0


def _cosine(t: int, total: int, r: Any, spe: int) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * min(t / max(total, 1), 1.0)))


def _linear(t: int, total: int, r: Any, spe: int) -> float:
    return max(0.0, 1.0 - t / max(total, 1))


def _step(t: int, total: int, r: Any, spe: int) -> float:
    return r.schedule.gamma ** (t // max(r.schedule.step_epochs * spe, 1))


def _one_cycle(t: int, total: int, r: Any, spe: int) -> float:
    """Up from lr/25 to lr over the first 30% of steps, then cosine down to lr/1e4."""
    peak = max(int(0.3 * total), 1)
    if t < peak:
        return 0.04 + 0.96 * t / peak
    frac = min((t - peak) / max(total - peak, 1), 1.0)
    return 1e-4 + (1.0 - 1e-4) * 0.5 * (1.0 + math.cos(math.pi * frac))


SCHEDULES: dict[str, Callable[[int, int, Any, int], float] | None] = {
    "constant": _constant,
    "cosine": _cosine,
    "linear": _linear,
    "step": _step,
    "one-cycle": _one_cycle,
    "plateau": None,  # epoch-driven: see Schedule.step_epoch
}


class Schedule:
    """Warmup then the recipe's schedule, stepped once per optimizer step (plateau: per epoch);
    a parameter group with a `peak_lr` follows the schedule from that peak instead of lr."""

    def __init__(self, opt: torch.optim.Optimizer, recipe: Any, steps_per_epoch: int):
        self.opt, self.recipe, self.spe = opt, recipe, max(steps_per_epoch, 1)
        self.total = max(recipe.loop.epochs * self.spe - recipe.schedule.warmup_steps, 1)
        self.step_no = 0
        self.plateau_scale = 1.0
        self.best: float | None = None
        self.bad_epochs = 0
        self._apply()

    def factor(self) -> float:
        r, t = self.recipe, self.step_no
        if t < r.schedule.warmup_steps:
            return (t + 1) / (r.schedule.warmup_steps + 1)
        fn = SCHEDULES[r.schedule.kind]
        t -= r.schedule.warmup_steps
        body = self.plateau_scale if fn is None else fn(t, self.total, r, self.spe)
        return body

    def lr(self) -> float:
        return self.recipe.optim.lr * self.factor()

    def _apply(self) -> None:
        factor = self.factor()
        for group in self.opt.param_groups:  # a group's own peak (e.g. encoder_lr), else lr
            group["lr"] = group.get("peak_lr", self.recipe.optim.lr) * factor

    def step_batch(self) -> None:
        self.step_no += 1
        self._apply()

    def step_epoch(self, value: float | None, better: Callable[[float, float], bool]) -> None:
        """reduce-on-plateau: multiply the LR by gamma after plateau_patience flat epochs."""
        if self.recipe.schedule.kind != "plateau" or value is None:
            return
        if self.best is None or better(value, self.best):
            self.best, self.bad_epochs = value, 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs > self.recipe.schedule.plateau_patience - 1:
                self.plateau_scale *= self.recipe.schedule.gamma
                self.bad_epochs = 0
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        return {"step_no": self.step_no, "plateau_scale": self.plateau_scale,
                "best": self.best, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._apply()
