"""logreg: multinomial logistic regression over a grid of L2 strengths, every C solved at once
by training's batched L-BFGS (raycache._fit.logreg, which a default linear head shares), each
C a candidate with its validation predictions and its linear head."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from raycache._fit.logreg import objective, solve
from raycache._probe.data import Candidate, Features

__all__ = ["fit", "objective", "solve"]


def fit(data: Features, cfg: Any, device: str, training: Any = None) -> list[Candidate]:
    """One candidate per C: validation predictions and the linear head's weights (`training`:
    unused, the METHODS shape)."""
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
