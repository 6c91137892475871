"""Distances for similarity objectives: pytorch-metric-learning's, by name, and
higher-is-closer scores: a matrix for retrieval, one per pair for pairs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["DISTANCES", "SIMILARITIES", "pair_scores", "pml_distance", "scores"]

DISTANCES = ("cosine", "dot", "euclidean", "manhattan")
SIMILARITIES = ("cosine", "dot")
"""The distances that are similarities (higher is closer): the only ones InfoNCE can use."""


def pml_distance(name: str) -> Any:
    """The pytorch-metric-learning distance object of that name (embeddings taken as they are:
    cosine normalises by itself, and normalising the others is the head's `normalize`)."""
    from pytorch_metric_learning import distances as d

    return {
        "cosine": lambda: d.CosineSimilarity(),
        "dot": lambda: d.DotProductSimilarity(normalize_embeddings=False),
        "euclidean": lambda: d.LpDistance(p=2, normalize_embeddings=False),
        "manhattan": lambda: d.LpDistance(p=1, normalize_embeddings=False),
    }[name]()


def scores(queries: torch.Tensor, gallery: torch.Tensor, name: str) -> torch.Tensor:
    """(queries, gallery) scores, higher meaning closer: similarities as they are, distances
    negated."""
    import torch

    if name == "cosine":
        q, g = (torch.nn.functional.normalize(t, dim=-1) for t in (queries, gallery))
        return q @ g.T
    if name == "dot":
        return queries @ gallery.T
    return -torch.cdist(queries, gallery, p=2.0 if name == "euclidean" else 1.0)


def pair_scores(left: torch.Tensor, right: torch.Tensor, name: str) -> torch.Tensor:
    """The score of each (left[i], right[i]) pair, higher meaning closer (as `scores`)."""
    import torch

    if name == "cosine":
        return torch.nn.functional.cosine_similarity(left, right, dim=-1)
    if name == "dot":
        return (left * right).sum(-1)
    return -(left - right).norm(p=2.0 if name == "euclidean" else 1.0, dim=-1)
