"""Multinomial logistic regression over a grid of L2 strengths, every C solved at once
(raycache._fit.lbfgs: one batched L-BFGS, each C with its own history and steps): the probe's
`logreg` (in this process and on Ray) and a linear classifier's full-batch solve
(raycache._train.worker.solved).

What C means, everywhere in raycache: scikit-learn's C on standardised features, as
`make_pipeline(StandardScaler(), LogisticRegression(C=C))` has it. Each feature is centred
and divided by its standard deviation over the training rows (`standardizer`; 1 for a
constant feature), then each C's objective is C * sum_i w_i CE_i + ||W||^2 / 2 (bias not
penalised), divided by C * n (the same minimiser; a mean loss keeps float32 well scaled); w_i
is the row's class weight (torch's CrossEntropyLoss `weight`, scaled to a mean of 1 over the
rows), 1 without weights. The solution is returned for the raw features (`to_raw`), so a
linear head applies it as is. The C values' weights are stacked as a batch dimension,
W [G, D, K]: one matrix product gives every C's logits, one more every C's gradient.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONTINUE_ROUNDS", "CONTINUE_SECONDS", "GRID", "MAX_ITER", "TOL", "WIDEN_DECADES",
           "data_term", "moment_sums", "objective", "penalty", "solve", "standardizer", "to_raw",
           "to_standard"]

GRID = (0.1, 1.0, 10.0)
"""A linear head's inverse L2 strengths (scikit-learn's C on standardised features, above),
solved at once; a fraction of its training rows chooses one (raycache._train.worker.solved)."""
MAX_ITER = 100
TOL = 1e-4
"""L-BFGS's iteration cap and gradient tolerance: scikit-learn's LogisticRegression defaults."""
WIDEN_DECADES = 3
"""Where a linear head's choice lands on the grid's edge, decades tried past it, each side, at
most (C from 1e-4 to 1e4 around GRID; raycache._train.worker.l2_search)."""
CONTINUE_ROUNDS = 4
"""More rounds of MAX_ITER iterations a capped solve gets, at most (500 iterations in all: the
probe's logreg cap)."""
CONTINUE_SECONDS = 120.0
"""No round of continuing a capped solve begins once continuing has taken this long."""


def moment_sums(x: Any) -> Any:
    """[sum of each feature, sum of its squares, rows] of rows `x` [n, D], float64 [2D + 1]:
    what parts of the rows add up before `standardizer`."""
    import torch

    x = x.reshape(-1, x.shape[-1]).to(torch.float64)
    n = torch.tensor([float(len(x))], dtype=torch.float64, device=x.device)
    return torch.cat([x.sum(0), x.pow(2).sum(0), n])


def standardizer(sums: Any) -> tuple[Any, Any]:
    """(mean, standard deviation) [D], float32, of the rows whose `moment_sums` (added up over
    parts) are `sums`; a constant feature (its deviation 0, or only the rounding of its sums)
    gets 1; no rows: (0, 1)."""
    import torch

    d = (len(sums) - 1) // 2
    n = float(sums[-1])
    if n == 0:
        return torch.zeros(d, device=sums.device), torch.ones(d, device=sums.device)
    mean = sums[:d] / n
    sd = (sums[d:-1] / n - mean.pow(2)).clamp(min=0).sqrt()
    sd = torch.where(sd > 1e-6 * mean.abs(), sd, torch.ones_like(sd))
    return mean.float(), sd.float()


def to_raw(w: Any, b: Any, mean: Any, sd: Any) -> tuple[Any, Any]:
    """A solution on standardised features (W [G, D, K], b [G, K]) for the raw ones:
    (z @ W + b) == x @ (W / sd) + (b - mean @ (W / sd))."""
    import torch

    raw = w / sd.to(w.dtype)[None, :, None]
    return raw, b - torch.einsum("d,gdk->gk", mean.to(w.dtype), raw)


def to_standard(w: Any, b: Any, mean: Any, sd: Any) -> tuple[Any, Any]:
    """`to_raw` undone: a solution for the raw features (W [G, D, K], b [G, K]) on the
    standardised ones (a warm start for `solve`)."""
    import torch

    return w * sd.to(w.dtype)[None, :, None], b + torch.einsum("d,gdk->gk", mean.to(w.dtype), w)


def objective(x: Any, y: Any, classes: int, cs: list[float], weights: Any = None) -> Any:
    """params [G, D*K + K] -> (each C's loss [G], its gradient [G, D*K + K]), analytic;
    `weights`: one per class (None: all 1). The data term plus the L2 penalty: a part of
    the rows on each of several workers sums its data_term, and one penalty is added."""
    import torch

    n = x.shape[0]
    scale = None
    if weights is not None:  # each row's weight over the rows' mean weight
        per_row = torch.as_tensor(weights, dtype=x.dtype, device=x.device)[y]
        scale = per_row / per_row.mean()
    data = data_term(x, y, classes, len(cs), n, scale)

    def f(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = data(params)
        more, more_grad = penalty(params, x.shape[1], classes, cs, n)
        return loss + more, grad + more_grad

    return f


def data_term(x: Any, y: Any, classes: int, groups: int, rows: int, scale: Any = None) -> Any:
    """params [G, D*K + K] -> (the cross-entropy of these rows `x` [n, D] summed and divided by
    `rows`, the rows of every part together [G]; its gradient [G, D*K + K]); `scale`: each
    row's weight, or None."""
    import torch

    n, d = x.shape
    g, k = groups, classes
    at = torch.arange(n, device=x.device)

    def f(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = params[:, : d * k].view(g, d, k)
        b = params[:, d * k:]
        logits = (x @ w.permute(1, 0, 2).reshape(d, g * k)).view(n, g, k) + b
        lse = torch.logsumexp(logits, -1)  # [n, g]
        ce = lse - logits[at, :, y]
        if scale is not None:
            ce = ce * scale[:, None]
        loss = ce.sum(0) / rows
        p = (logits - lse[..., None]).exp_()  # the softmax (torch's is slow over few classes)
        p[at, :, y] -= 1.0
        p /= rows
        if scale is not None:
            p *= scale[:, None, None]
        gw = (x.T @ p.view(n, g * k)).view(d, g, k).permute(1, 0, 2)
        return loss, torch.cat([gw.reshape(g, d * k), p.sum(0)], 1)

    return f


def penalty(params: Any, dim: int, classes: int, cs: list[float], rows: int) -> tuple[Any, Any]:
    """(each C's ||W||^2 / (2 C rows) [G], its gradient [G, D*K + K]): the bias not penalised."""
    import torch

    g, d, k = len(cs), dim, classes
    inv = torch.tensor([1.0 / (c * rows) for c in cs], dtype=params.dtype,
                       device=params.device)
    w = params[:, : d * k].view(g, d, k)
    grad = torch.cat([(inv[:, None, None] * w).reshape(g, d * k),
                      torch.zeros(g, k, dtype=params.dtype, device=params.device)], 1)
    return 0.5 * inv * w.pow(2).sum((1, 2)), grad


def solve(x: Any, y: Any, classes: int, cs: list[float], max_iter: int = 500,
          tol: float = 1e-6, weights: Any = None, scale: tuple[Any, Any] | None = None,
          start: tuple[Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """(W [G, D, K], b [G, K] for the raw features, iterations [G]) minimising each C's
    objective on rows `x` [n, D] (a float tensor) standardised, with class ids `y` [n]
    (`weights`: one per class, or None; `scale`: the (mean, sd) to standardise with, else
    these rows' own; `start`: a solution (W, b) for the raw features to start from, else
    zeros)."""
    import torch

    from raycache._core.threads import sized
    from raycache._fit.lbfgs import minimize

    n, d = x.shape
    g = len(cs)
    mean, sd = scale if scale is not None else standardizer(moment_sums(x))
    z = (x - mean.to(x.dtype)) / sd.to(x.dtype)
    if start is None:
        x0 = torch.zeros(g, d * classes + classes, dtype=x.dtype, device=x.device)
    else:
        w0, b0 = to_standard(start[0].to(x.dtype), start[1].to(x.dtype), mean, sd)
        x0 = torch.cat([w0.reshape(g, d * classes), b0], 1)
    with sized(4 * n * d * g * classes, x.device.type):
        out = minimize(objective(z, y, classes, cs, weights), x0, max_iter, tol, ftol=0.0)
    w, b = to_raw(out.params[:, : d * classes].view(g, d, classes), out.params[:, d * classes:],
                  mean, sd)
    return w, b, out.iterations
