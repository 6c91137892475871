"""Retrieval metrics over a labelled set: every row a query against all the others (same group
means relevant, the query itself excluded): precision@k, recall@k, MRR, R-precision, mAP@k.

Hand-written (vectorised over chunks of queries, each fully ranked) because torchmetrics'
retrieval metrics take one flat list of every (query, candidate) score and keep it all in
memory, and its average precision treats scores <= 0 as irrelevant, which suits probabilities
but not cosine similarities or negated distances. Queries whose group has no other row have
nothing to find and are left out, as torchmetrics' empty_target_action="skip" does.
"""

from __future__ import annotations

import torch

from raycache._train.objectives.distances import scores

__all__ = ["CHUNK", "metric_names", "retrieval_metrics"]

CHUNK = 512
"""Queries ranked at once (a CHUNK x rows score matrix)."""


def metric_names(ks: tuple[int, ...]) -> list[str]:
    out = ["mrr", "r_precision"]
    for k in ks:
        out += [f"precision_at_{k}", f"recall_at_{k}", f"map_at_{k}"]
    return out


def retrieval_metrics(emb: torch.Tensor, groups: torch.Tensor, distance: str,
                      ks: tuple[int, ...]) -> dict[str, float]:
    """Means over the queries that have a relevant row:

    - precision_at_k: relevant rows among the k nearest, over k;
    - recall_at_k: relevant rows among the k nearest, over all relevant rows (R);
    - mrr: 1 / the rank of the nearest relevant row;
    - r_precision: relevant rows among the R nearest, over R;
    - map_at_k: sum over ranks i <= k of precision@i at each relevant row, over min(k, R).
    """
    n = len(groups)
    totals = dict.fromkeys(metric_names(ks), 0.0)
    counted = 0
    if n < 2:
        return totals
    emb = emb.float()
    ranks = torch.arange(1, n + 1, device=emb.device, dtype=torch.float32)
    for lo in range(0, n, CHUNK):
        hi = min(lo + CHUNK, n)
        s = scores(emb[lo:hi], emb, distance)
        rows = torch.arange(hi - lo, device=emb.device)
        s[rows, rows + lo] = -torch.inf  # the query itself goes last, and is not relevant
        order = torch.argsort(s, dim=1, descending=True, stable=True)
        rel = groups[order] == groups[lo:hi, None]
        rel[order == (rows + lo)[:, None]] = False
        big_r = rel.sum(1)
        keep = big_r > 0
        if not keep.any():
            continue
        rel, big_r = rel[keep].float(), big_r[keep].float()
        counted += len(rel)
        hits = rel.cumsum(1)
        first = rel.argmax(1).float() + 1
        totals["mrr"] += (1.0 / first).sum().item()
        at_r = hits.gather(1, (big_r.long() - 1)[:, None]).squeeze(1)
        totals["r_precision"] += (at_r / big_r).sum().item()
        precision_at = hits / ranks[None, :]
        for k in ks:
            kk = min(k, n)
            totals[f"precision_at_{k}"] += (hits[:, kk - 1] / k).sum().item()
            totals[f"recall_at_{k}"] += (hits[:, kk - 1] / big_r).sum().item()
            ap = (precision_at[:, :kk] * rel[:, :kk]).sum(1) / torch.clamp(big_r, max=k)
            totals[f"map_at_{k}"] += ap.sum().item()
    return {name: value / max(counted, 1) for name, value in totals.items()}
