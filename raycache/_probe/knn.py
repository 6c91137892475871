"""knn: each validation row's k nearest training rows vote, weighted by exp(sim / T)
(DINOv2's kNN protocol), searched exactly by blocked matrix products over the training rows.

One pass keeps each query's best max(k) similarities so far: a block's products [q, B], their
top max(k), merged with the running top max(k). Every k of the grid reads its first k of the
same neighbours. Queries go in chunks too, so memory stays queries_chunk x block_rows. On Ray,
each worker searches its part of the training rows, and the parts' best max(k) are merged
(`merge`) before the same votes (`predict`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raycache._probe.data import Candidate, Features

__all__ = ["QUERY_ROWS", "fit", "merge", "neighbours", "predict", "prepared", "votes"]

QUERY_ROWS = 8192
"""Queries per chunk of the search."""


def prepared(x: np.ndarray, metric: str, device: str) -> Any:
    """Rows as a float32 tensor on `device`, L2-normalised for cosine."""
    import torch

    x = np.ascontiguousarray(x, dtype=np.float32)
    if not x.flags.writeable:  # rows from Ray's object store: read-only, so copied
        x = x.copy()
    t = torch.from_numpy(x).to(device)
    return torch.nn.functional.normalize(t, dim=1) if metric == "cosine" else t


def neighbours(queries: Any, bank: Any, k: int, block_rows: int = 8192
               ) -> tuple[Any, Any]:
    """(similarities [q, k], bank row ids [q, k]) of each query's k most similar bank rows
    (dot products of the rows as given), best first; blocked over the bank."""
    import torch

    k = min(k, len(bank))
    best_s = torch.full((len(queries), 0), -torch.inf, device=queries.device)
    best_i = torch.zeros((len(queries), 0), dtype=torch.long, device=queries.device)
    for start in range(0, len(bank), block_rows):
        sims = queries @ bank[start: start + block_rows].T
        s, i = sims.topk(min(k, sims.shape[1]), dim=1)
        best_s = torch.cat([best_s, s], 1)
        best_i = torch.cat([best_i, i + start], 1)
        if start:  # merged with the blocks before: best first again (all of them, where <= k)
            best_s, pick = best_s.topk(min(k, best_s.shape[1]), dim=1)
            best_i = best_i.gather(1, pick)
    return best_s, best_i


def merge(parts: list[tuple[Any, Any]], k: int) -> tuple[Any, Any]:
    """(similarities [q, k], labels [q, k]), best first, of the k most similar among several
    searches' (similarities, labels) of the same queries (each a part of the training rows,
    best first): the top k of the parts' top k's is the top k of all."""
    import torch

    sims = torch.cat([p[0] for p in parts], 1)
    labels = torch.cat([p[1] for p in parts], 1)
    sims, pick = sims.topk(min(k, sims.shape[1]), dim=1)
    return sims, labels.gather(1, pick)


def predict(sims: Any, labels: Any, ks: list[int], classes: int, temperature: float
            ) -> dict[int, np.ndarray]:
    """Each k's predicted class per query, from its neighbours' (similarities, labels), best
    first: the votes of `votes`, shifted by the best similarity (never an overflow of exp)."""
    sims = sims - sims[:, :1]
    return {k: votes(sims, labels, k, classes, temperature).cpu().numpy() for k in ks}


def votes(sims: Any, labels: Any, k: int, classes: int, temperature: float) -> Any:
    """Predicted class per query: the sum of exp(sim / temperature) over its first k
    neighbours' classes, the largest."""
    import torch

    w = torch.exp(sims[:, :k] / temperature)
    scores = torch.zeros(len(sims), classes, dtype=w.dtype, device=w.device)
    scores.scatter_add_(1, labels[:, :k], w)
    return scores.argmax(1)


def fit(data: Features, cfg: Any, device: str, training: Any = None) -> list[Candidate]:
    """One candidate per k, all from one search (`training`: unused, the METHODS shape)."""
    from raycache._core.threads import sized

    queries = min(len(data.x_val), QUERY_ROWS)
    block = min(len(data.x_train), cfg.knn.block_rows)
    with sized(2 * queries * block * data.x_train.shape[1], device):
        return _fit(data, cfg, device)


def _fit(data: Features, cfg: Any, device: str) -> list[Candidate]:
    import torch

    settings = cfg.knn
    bank = prepared(data.x_train, settings.metric, device)
    y = torch.from_numpy(data.y_train).to(device)
    kmax = max(settings.k)
    preds: dict[int, list[np.ndarray]] = {k: [] for k in settings.k}
    for start in range(0, len(data.x_val), QUERY_ROWS):
        q = prepared(data.x_val[start: start + QUERY_ROWS], settings.metric, device)
        sims, ids = neighbours(q, bank, kmax, settings.block_rows)
        found = predict(sims, y[ids], settings.k, data.spec.num_classes, settings.temperature)
        for k in settings.k:
            preds[k].append(found[k])
    empty = np.zeros(0, np.int64)
    return [Candidate({"k": k, "metric": settings.metric, "T": settings.temperature},
                      np.concatenate(preds[k]) if preds[k] else empty)
            for k in settings.k]
