"""The similarity objectives' settings: `groups:` (a label column of group ids) and `pairs:` (a
table of scored pairs of keys); TrainConfig (raycache._train.config) holds one of each."""

from __future__ import annotations

from dataclasses import dataclass

from raycache._core.config import sweepable

__all__ = ["GroupsConfig", "PairsConfig"]


@dataclass(frozen=True)
class GroupsConfig:
    """objective: groups: similarity learning where the label column names each row's group
    (rows of a group are similar, rows of different groups are not).

    Example:
        ```python
        run = raycache.train({"cache": "faces", "objective": "groups",
                              "groups": {"loss": "infonce", "scale": 20}})
        ```
    """

    loss: str = sweepable("triplet", sweep="objective groups: losses, e.g. [triplet, infonce]")
    """contrastive, triplet, infonce (alias mnr: multiple-negatives ranking), arcface, cosface
    or softmax (raycache._train.objectives.groups.LOSSES)."""
    miner: str = sweepable("none", sweep="objective groups: miners, e.g. [none, hard]")
    """contrastive: none (every pair) or hard (hardest positive and negative per anchor);
    triplet: none (every triplet), all (those inside the margin), hard or semihard."""
    margin: float | None = sweepable(None, sweep="objective groups: margins, e.g. [0.1, 0.2]")
    """triplet: margin; contrastive: negative margin; arcface: angle (degrees); cosface:
    cosine margin. Left out: pytorch-metric-learning's default for the loss and distance."""
    pos_margin: float | None = None
    """contrastive: positive margin (default 0 for distances, 1 for similarities)."""
    scale: float | None = sweepable(None, sweep="objective groups: scales, e.g. [10, 20]")
    """infonce, softmax: 1/temperature (default 20); arcface, cosface: the logit scale (64)."""
    soft_margin: bool = False
    """triplet: the soft-margin form log(1 + exp(d_ap - d_an)) instead of a hinge."""


@dataclass(frozen=True)
class PairsConfig:
    """objective: pairs: similarity learned from a table of pairs of cache keys, each with a
    score (a graded similarity, e.g. STS in [0, 1]) or a 0/1 label (Quaterion's
    SimilarityPairSample; sentence-transformers' pair losses).

    Example:
        ```python
        run = raycache.train({"cache": "sentences", "objective": "pairs",
                              "pairs": {"path": "pairs.parquet", "loss": "mnr"}})
        ```
    """

    path: str | None = None
    """The pairs table: a Parquet or JSONL (or CSV) file, folder or glob, local or any fsspec
    URI (credentials from the environment). Its keys are joined against the cache's key."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the file suffix when left out."""
    left: str = "left"
    """Column holding the first key of each pair."""
    right: str = "right"
    """Column holding the second key of each pair."""
    score: str | None = "score"
    """Column holding the pair's score or 0/1 label; none (mnr only): every pair is a
    positive pair (anchor, positive)."""
    loss: str = "cosine"
    """contrastive (0/1 labels, margins on `distance`), cosine (MSE between the cosine of the
    two embeddings and the score) or mnr (multiple-negatives ranking over in-batch
    negatives, gathered across DDP workers)."""
    margin: float | None = None
    """contrastive: the negative margin (default 0 for similarities, 1 for distances)."""
    pos_margin: float | None = None
    """contrastive: the positive margin (default 1 for similarities, 0 for distances)."""
    scale: float = 20.0
    """mnr: the similarities' scale (1/temperature), as sentence-transformers' `scale`."""
    symmetric: bool = True
    """mnr: average the left->right and right->left losses (false: left->right only)."""
    positives: float | None = None
    """mnr: train only on pairs whose score is at least this (e.g. 1 for 0/1 labels); none:
    every pair is a positive pair. Validation keeps every pair."""
