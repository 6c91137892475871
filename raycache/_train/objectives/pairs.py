"""objective: pairs: similarity learned from a table of scored pairs of cache keys.

A batch is (pairs, 2, dim) embeddings and (pairs, 3) targets: score, left key id, right key id
(raycache._train.objectives.pair_table). Losses:
- contrastive: pytorch-metric-learning's ContrastiveLoss on the given pairs (0/1 labels);
- cosine: MSE between the cosine of the two embeddings and the score, as sentence-transformers'
  CosineSimilarityLoss (by hand: pytorch-metric-learning has no loss that regresses a pair's
  similarity onto a graded score; it is one line);
- mnr: multiple-negatives ranking, pytorch-metric-learning's SupConLoss of each left against
  every right of the batch (of every worker: gathered), and symmetric: right against left too.
  Copies of the positive's key, and the anchor's own key, are never negatives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache._train.objectives.base import Family
from raycache._train.objectives.distances import DISTANCES, SIMILARITIES, pair_scores, pml_distance

if TYPE_CHECKING:
    import torch

    from raycache._cache.committed import Cache
    from raycache._train.config import PairsConfig, TrainConfig
    from raycache._train.objectives.pair_table import PairPart
    from raycache._train.runspec import WorkerSpec

__all__ = ["LOSSES", "PAIRS", "PairMetrics", "Pairs", "build_loss", "mnr_loss"]

LOSSES = ("contrastive", "cosine", "mnr")
CHUNK = 512
"""Validation queries ranked at once for mnr's retrieval metrics."""


def build_loss(p: PairsConfig, distance: str) -> torch.nn.Module:
    """The loss module the settings name."""
    import torch
    from pytorch_metric_learning import losses, reducers

    if p.loss == "contrastive":
        similarity = distance in SIMILARITIES
        pos = p.pos_margin if p.pos_margin is not None else (1.0 if similarity else 0.0)
        neg = p.margin if p.margin is not None else (0.0 if similarity else 1.0)
        return losses.ContrastiveLoss(pos_margin=pos, neg_margin=neg,
                                      distance=pml_distance(distance))
    if p.loss == "mnr":  # the mean over every anchor, as a cross-entropy (no zeros dropped)
        return losses.SupConLoss(temperature=1.0 / p.scale, distance=pml_distance(distance),
                                 reducer=reducers.MeanReducer())
    return torch.nn.MSELoss()


def mnr_loss(criterion: torch.nn.Module, anchors: torch.Tensor, candidates: torch.Tensor,
             anchor_ids: torch.Tensor, partner_ids: torch.Tensor) -> torch.Tensor:
    """Each anchor's partner (the candidate of the same index) against every other candidate
    as a negative, except copies of the partner's key and of the anchor's own key."""
    import torch

    n = len(anchors)
    near = (partner_ids[None, :] == partner_ids[:, None]) | \
        (partner_ids[None, :] == anchor_ids[:, None])
    a2, neg = (~near).nonzero(as_tuple=True)
    own = torch.arange(n, device=anchors.device)
    return criterion(anchors, indices_tuple=(own, own, a2, neg), ref_emb=candidates)


class Pairs:
    """A projection to embedding_dim trained so that a pair's similarity follows its score."""

    def __init__(self, spec: WorkerSpec, device: torch.device):
        r = spec.recipe
        self.p, self.distance, self.dim = r.pairs, r.loss.distance, spec.head.width
        self.gathers = r.pairs.loss == "mnr"
        self.criterion = build_loss(r.pairs, r.loss.distance).to(device)
        if r.pairs.loss == "contrastive":
            # predicted similar: closer than halfway between the two margins
            mid = (self.criterion.pos_margin + self.criterion.neg_margin) / 2
            self.threshold = mid if r.loss.distance in SIMILARITIES else -mid
        else:
            self.threshold = 0.5

    def batch_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        import torch

        left, right = out[:, 0], out[:, 1]
        if self.p.loss == "cosine":
            return self.criterion(pair_scores(left, right, "cosine"), y[:, 0].to(out.dtype))
        if self.p.loss == "contrastive":
            n, rows = len(left), torch.arange(len(left), device=out.device)
            pos = y[:, 0] > 0.5
            pairs = (rows[pos], rows[pos] + n, rows[~pos], rows[~pos] + n)
            return self.criterion(torch.cat([left, right]), indices_tuple=pairs)
        value = mnr_loss(self.criterion, left, right, y[:, 1], y[:, 2])
        if self.p.symmetric:
            value = (value + mnr_loss(self.criterion, right, left, y[:, 2], y[:, 1])) / 2
        return value

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from raycache._train.objectives.gather import gathered_loss

        return gathered_loss(self.batch_loss, out, y, self.gathers)

    def eval_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.p.loss == "mnr" and self.p.positives is not None:
            keep = y[:, 0] >= self.p.positives  # validation keeps the negative pairs too
            out, y = out[keep], y[keep]
        return self.batch_loss(out, y)

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """mnr: pairs whose right is the left's nearest right of the batch; else pairs whose
        similarity is on the same side of the threshold as the score is of 0.5."""
        if self.p.loss == "mnr":
            from raycache._train.objectives.distances import scores

            nearest = scores(out[:, 0], out[:, 1], self.distance).argmax(1)
            return (y[nearest, 2] == y[:, 2]).sum()
        similar = pair_scores(out[:, 0], out[:, 1], self.distance) > self.threshold
        return (similar == (y[:, 0] > 0.5)).sum()

    def evaluator(self) -> PairMetrics:
        return PairMetrics(self.distance, self.p, self.dim)


class PairMetrics:
    """Over the validation pairs of every worker (gathered): val_spearman and val_pearson of
    the head's similarity (in `distance`, cosine by default: the STS convention) against the
    score; for 0/1 labels val_auc, and val_acc and val_threshold at the best threshold; for
    mnr val_recall_at_1 and val_mrr of each positive pair's left against every right (val_acc
    too, when the labels are not 0/1)."""

    def __init__(self, distance: str, p: PairsConfig, dim: int):
        self.distance, self.p, self.dim = distance, p, dim
        self.sims: list[torch.Tensor] = []
        self.ys: list[torch.Tensor] = []
        self.outs: list[torch.Tensor] = []

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None:
        self.sims.append(pair_scores(out[:, 0], out[:, 1], self.distance).double())
        self.ys.append(y)
        if self.p.loss == "mnr":
            self.outs.append(out)

    def compute(self) -> dict[str, float]:
        import torch

        from raycache._train.objectives.gather import all_gather
        from raycache._train.objectives.pair_metrics import (
            best_accuracy,
            pearson,
            roc_auc,
            spearman,
        )

        with torch.no_grad():
            sims = all_gather(torch.cat(self.sims) if self.sims
                              else torch.empty(0, dtype=torch.float64))
            y = all_gather(torch.cat(self.ys) if self.ys
                           else torch.empty(0, 3, dtype=torch.float64))
            out: dict[str, float] = {}
            score = y[:, 0]
            if len(score) > 1 and score.min() < score.max():
                out["val_spearman"] = spearman(sims, score)
                out["val_pearson"] = pearson(sims, score)
                if ((score == 0) | (score == 1)).all():
                    out["val_auc"] = roc_auc(sims, score)
                    out["val_acc"], out["val_threshold"] = best_accuracy(sims, score)
            if self.p.loss == "mnr":
                emb = all_gather(torch.cat(self.outs) if self.outs
                                 else torch.empty(0, 2, self.dim))
                found = self.retrieval(emb, y)
                out.update(found)
                out.setdefault("val_acc", found["val_recall_at_1"])
        return out

    def retrieval(self, emb: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Each positive pair's left against the rights of every positive pair: the rank of
        the first right with its partner's key (other copies of the anchor's key skipped)."""
        import torch

        from raycache._train.objectives.distances import scores

        if self.p.positives is not None:
            keep = y[:, 0] >= self.p.positives
            emb, y = emb[keep], y[keep]
        n, hits, rr = len(y), 0.0, 0.0
        for lo in range(0, n, CHUNK):
            hi = min(lo + CHUNK, n)
            s = scores(emb[lo:hi, 0].float(), emb[:, 1].float(), self.distance)
            partner, anchor = y[lo:hi, 2, None], y[lo:hi, 1, None]
            right = y[None, :, 2] == partner
            s[(y[None, :, 2] == anchor) & ~right] = -torch.inf
            best = s.masked_fill(~right, -torch.inf).max(1).values
            rank = 1 + (s > best[:, None]).sum(1).double()
            hits += float((rank == 1).sum())
            rr += float((1 / rank).sum())
        return {"val_recall_at_1": hits / max(n, 1), "val_mrr": rr / max(n, 1)}


def problems(cfg: TrainConfig) -> list[str]:
    p, out = cfg.pairs, []
    if not p.path:
        out.append("pairs.path: missing; name the pairs table (a Parquet or JSONL file of "
                   "two key columns and a score) for objective: pairs")
    if cfg.loss.distance not in DISTANCES:
        out.append(f"distance={cfg.loss.distance!r}: expected one of {DISTANCES}")
    if p.loss not in LOSSES:
        return [*out, f"pairs.loss={p.loss!r}: unknown; expected one of {LOSSES}"]
    if p.left == p.right:
        out.append(f"pairs.left and pairs.right are both {p.left!r}; name two key columns")
    if p.score is None and p.loss != "mnr":
        out.append(f"pairs.score is none, but pairs.loss {p.loss} needs a score or 0/1 label "
                   "column; name it, or use pairs.loss: mnr for a table of positive pairs")
    if p.loss == "mnr" and cfg.loss.distance not in SIMILARITIES:
        out.append(f"distance={cfg.loss.distance!r}: pairs.loss mnr needs a similarity, one of "
                   f"{SIMILARITIES}")
    if p.scale <= 0:
        out.append(f"pairs.scale={p.scale}: must be > 0, e.g. 20")
    if p.positives is not None and p.loss != "mnr":
        out.append(f"pairs.positives applies to pairs.loss mnr only, not {p.loss}; leave it out")
    for name in ("margin", "pos_margin"):
        if getattr(p, name) is not None and p.loss != "contrastive":
            out.append(f"pairs.{name} applies to pairs.loss contrastive only, not {p.loss}")
    if cfg.loss.class_weights is not None or cfg.loss.label_smoothing:
        out.append("class_weights and label_smoothing apply to objective classification, not "
                   "pairs; leave them out")
    return out


def out_dim(cfg: TrainConfig, classes: int) -> int:
    return cfg.embedding_dim


def data_sources(spec: WorkerSpec, rank: int, device: torch.device) -> tuple[PairPart, PairPart]:
    from raycache._train.objectives.pair_table import data_sources

    return data_sources(spec, rank, device)


def data_problems(cfg: TrainConfig, cache: Cache) -> list[str]:
    from raycache._train.objectives.pair_table import data_problems

    return data_problems(cfg, cache)


def metrics(cfg: TrainConfig) -> tuple[str, ...]:
    """Those of PairMetrics: the ones of 0/1 labels are reported only when the labels are."""
    found = ("val_spearman", "val_pearson", "val_auc", "val_threshold")
    return (*found, "val_recall_at_1", "val_mrr") if cfg.pairs.loss == "mnr" else found


PAIRS = Family(build=Pairs, problems=problems, out_dim=out_dim, labels="none",
               data_sources=data_sources, data_problems=data_problems, metrics=metrics)
