"""logreg: multinomial logistic regression over a grid of L2 strengths, every C solved at once
(raycache._probe.lbfgs: one batched L-BFGS, each C with its own history and steps).

Each C's objective is scikit-learn's, C * sum_i CE_i + ||W||^2 / 2 (bias not penalised),
divided by C * n (the same minimiser; a mean loss keeps float32 well scaled). The C values'
weights are stacked as a batch dimension, W [G, D, K]: one matrix product gives every C's
logits, one more every C's gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from raycache._probe.data import Candidate, Features

__all__ = ["fit", "objective", "solve"]


def objective(x: Any, y: Any, classes: int, cs: list[float]) -> Any:
    """params [G, D*K + K] -> (each C's loss [G], its gradient [G, D*K + K]), analytic."""
    import torch

    n, d = x.shape
    g, k = len(cs), classes
    inv = torch.tensor([1.0 / (c * n) for c in cs], dtype=x.dtype, device=x.device)
    rows = torch.arange(n, device=x.device)

    def f(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = params[:, : d * k].view(g, d, k)
        b = params[:, d * k:]
        logits = (x @ w.permute(1, 0, 2).reshape(d, g * k)).view(n, g, k) + b
        lse = torch.logsumexp(logits, -1)  # [n, g]
        loss = (lse - logits[rows, :, y]).mean(0) + 0.5 * inv * w.pow(2).sum((1, 2))
        p = torch.softmax(logits, -1)
        p[rows, :, y] -= 1.0
        p /= n
        gw = (x.T @ p.view(n, g * k)).view(d, g, k).permute(1, 0, 2) + inv[:, None, None] * w
        return loss, torch.cat([gw.reshape(g, d * k), p.sum(0)], 1)

    return f


def solve(x: Any, y: Any, classes: int, cs: list[float], max_iter: int = 500,
          tol: float = 1e-6) -> tuple[Any, Any, Any]:
    """(W [G, D, K], b [G, K], iterations [G]) minimising each C's objective on rows `x`
    [n, D] (a float tensor) with class ids `y` [n]."""
    import torch

    from raycache._probe.lbfgs import minimize
    from raycache._probe.threads import sized

    n, d = x.shape
    g = len(cs)
    start = torch.zeros(g, d * classes + classes, dtype=x.dtype, device=x.device)
    with sized(4 * n * d * g * classes, x.device.type):
        out = minimize(objective(x, y, classes, cs), start, max_iter, tol, ftol=0.0)
    w = out.params[:, : d * classes].view(g, d, classes)
    return w, out.params[:, d * classes:], out.iterations


def fit(data: Features, cfg: Any, device: str) -> list[Candidate]:
    """One candidate per C: validation predictions and the linear head's weights."""
    import torch

    settings = cfg.logreg
    x = torch.from_numpy(np.ascontiguousarray(data.x_train)).to(device)
    y = torch.from_numpy(data.y_train).to(device)
    k = data.spec.num_classes
    w, b, iters = solve(x, y, k, list(settings.C), settings.max_iter, settings.tol)
    xv = torch.from_numpy(np.ascontiguousarray(data.x_val)).to(device)
    d = xv.shape[1]
    logits = (xv @ w.permute(1, 0, 2).reshape(d, -1)).view(len(xv), len(settings.C), k) + b
    preds = logits.argmax(-1).cpu().numpy()
    spec = dataclasses.replace(data.spec, head="linear", hidden=(), dropout=0.0)
    return [Candidate({"C": c, "iterations": int(iters[i])}, preds[:, i], spec,
                      {"1.weight": w[i].T.contiguous().cpu(), "1.bias": b[i].cpu()})
            for i, c in enumerate(settings.C)]
