"""L-BFGS over a batch of independent problems at once: G parameter vectors [G, m], each with
its own curvature history, step length and stopping test, every function evaluation one
vectorised call that returns all G losses and gradients.

One L-BFGS over the sum of G separable losses would share one line search and one curvature
model between problems whose scales differ by orders of magnitude (C from 1e-3 to 30), and
converge as slowly as the worst of them; this keeps G solves independent, as scikit-learn's
one-by-one loop does, while each evaluation is one batched matrix product.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Solved", "minimize"]

Objective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""params [G, m] -> (losses [G], gradients [G, m])."""

ARMIJO = 1e-4
"""Sufficient decrease a step must give (of the directional derivative times the step)."""
BACKTRACK = 0.5
MAX_BACKTRACKS = 30


@dataclass
class Solved:
    params: torch.Tensor
    """[G, m]: each problem's solution."""
    losses: torch.Tensor
    iterations: torch.Tensor
    """[G]: iterations each problem took before it stopped."""
    evaluations: int
    """Batched function evaluations in all (each one evaluates every problem)."""


def minimize(f: Objective, x0: torch.Tensor, max_iter: int = 500, gtol: float = 1e-6,
             ftol: float = 1e-9, history: int = 10) -> Solved:
    """Minimise each row's problem from `x0` [G, m]: a problem stops when its largest gradient
    entry is <= gtol, or its relative loss decrease is <= ftol (scipy's L-BFGS-B tests), or at
    max_iter iterations."""
    x = x0.clone()
    loss, grad = f(x)
    g_count = x.shape[0]
    evals = 1
    s_hist: list[torch.Tensor] = []
    y_hist: list[torch.Tensor] = []
    rho_hist: list[torch.Tensor] = []
    iters = torch.zeros(g_count, dtype=torch.long, device=x.device)
    active = grad.abs().amax(1) > gtol
    for _ in range(max_iter):
        if not bool(active.any()):
            break
        direction = -_two_loop(grad, s_hist, y_hist, rho_hist)
        slope = (grad * direction).sum(1)
        uphill = slope >= 0  # a stale curvature pair: fall back to steepest descent there
        if bool(uphill.any()):
            direction = torch.where(uphill[:, None], -grad, direction)
            slope = (grad * direction).sum(1)
        step = torch.ones(g_count, dtype=x.dtype, device=x.device)
        if not s_hist:  # the first step: scaled like torch's and scipy's
            step = torch.clamp(1.0 / grad.abs().sum(1), max=1.0)
        step = torch.where(active, step, torch.zeros_like(step))
        for _ in range(MAX_BACKTRACKS):
            trial = x + step[:, None] * direction
            new_loss, new_grad = f(trial)
            evals += 1
            ok = (new_loss <= loss + ARMIJO * step * slope) | ~active
            if bool(ok.all()):
                break
            step = torch.where(ok, step, step * BACKTRACK)
        else:  # no decrease found: those problems are as good as float rounding allows
            active = active & ok
            new_loss = torch.where(ok, new_loss, loss)
            new_grad = torch.where(ok[:, None], new_grad, grad)
            trial = torch.where(ok[:, None], trial, x)
        s, y = trial - x, new_grad - grad
        sy = (s * y).sum(1)
        rho = torch.where(sy > 1e-10, 1.0 / sy.clamp(min=1e-10), torch.zeros_like(sy))
        s_hist.append(s)
        y_hist.append(y)
        rho_hist.append(rho)
        if len(s_hist) > history:
            s_hist.pop(0)
            y_hist.pop(0)
            rho_hist.pop(0)
        change = (loss - new_loss) / torch.maximum(torch.maximum(loss.abs(), new_loss.abs()),
                                                    torch.ones_like(loss))
        iters += active.long()
        x, loss, grad = trial, new_loss, new_grad
        active = active & (grad.abs().amax(1) > gtol) & (change > ftol)
    return Solved(x, loss, iters, evals)


def _two_loop(grad: torch.Tensor, s_hist: list[torch.Tensor], y_hist: list[torch.Tensor],
              rho_hist: list[torch.Tensor]) -> torch.Tensor:
    """H_k grad for each problem, from its own history (a pair with rho 0 counts for
    nothing: a problem that stopped, or a pair without positive curvature)."""
    q = grad.clone()
    alphas = []
    for s, y, rho in zip(reversed(s_hist), reversed(y_hist), reversed(rho_hist), strict=True):
        a = rho * (s * q).sum(1)
        q -= a[:, None] * y
        alphas.append(a)
    if s_hist:
        gamma = torch.ones_like(rho_hist[-1])
        found = torch.zeros_like(gamma, dtype=torch.bool)
        for s, y, rho in zip(reversed(s_hist), reversed(y_hist), reversed(rho_hist),
                             strict=True):  # the newest pair with curvature scales H_0
            yy = (y * y).sum(1)
            use = (rho > 0) & ~found & (yy > 0)
            gamma = torch.where(use, (s * y).sum(1) / yy.clamp(min=1e-30), gamma)
            found |= use
        q = gamma[:, None] * q
    for (s, y, rho), a in zip(zip(s_hist, y_hist, rho_hist, strict=True), reversed(alphas),
                              strict=True):
        beta = rho * (y * q).sum(1)
        q += s * (a - beta)[:, None]
    return q
