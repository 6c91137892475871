"""objective: groups: similarity learning where the label column is each row's group.

Losses, miners and distances are pytorch-metric-learning's; the gather across DDP workers is
raycache._train.objectives.gather (see there why); validation is retrieval over every worker's rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raycache._train.objectives.base import Family
from raycache._train.objectives.distances import DISTANCES, SIMILARITIES, pml_distance, scores

if TYPE_CHECKING:
    import torch

    from raycache._train.config import GroupsConfig, TrainConfig
    from raycache._train.runspec import WorkerSpec

__all__ = ["GROUPS", "GATHERING", "LOSSES", "MINERS", "Groups", "Retrieval", "build_loss",
           "build_miner", "nearest_hits"]

LOSSES = ("contrastive", "triplet", "infonce", "mnr", "arcface", "cosface", "softmax")
"""infonce (mnr, its sentence-transformers name): a softmax over every other row of the batch
(of every worker), the rows of the same group the right answers (supervised contrastive)."""
GATHERING = ("contrastive", "triplet", "infonce", "mnr")
"""Losses over in-batch pairs: they see every worker's rows. The others are per row."""
MINERS = {"contrastive": ("none", "hard"), "triplet": ("none", "all", "hard", "semihard")}
DEFAULT_SCALE = 20.0


def build_loss(g: GroupsConfig, distance: str, groups: int, dim: int) -> torch.nn.Module:
    """The pytorch-metric-learning loss the settings name."""
    from pytorch_metric_learning import losses

    given = {k: v for k, v in (("margin", g.margin), ("scale", g.scale)) if v is not None}
    similarity = distance in SIMILARITIES
    if g.loss == "contrastive":
        pos = g.pos_margin if g.pos_margin is not None else (1.0 if similarity else 0.0)
        neg = g.margin if g.margin is not None else (0.0 if similarity else 1.0)
        return losses.ContrastiveLoss(pos_margin=pos, neg_margin=neg,
                                      distance=pml_distance(distance))
    if g.loss == "triplet":
        return losses.TripletMarginLoss(margin=g.margin if g.margin is not None else 0.05,
                                        smooth_loss=g.soft_margin,
                                        distance=pml_distance(distance))
    if g.loss in ("infonce", "mnr"):
        # SupConLoss is InfoNCE with every same-group row a positive, on the batch's score
        # matrix; NTXentLoss builds a (positive pairs x negative pairs) matrix, GBs at batch 256
        return losses.SupConLoss(temperature=1.0 / (g.scale or DEFAULT_SCALE),
                                 distance=pml_distance(distance))
    if g.loss == "arcface":
        return losses.ArcFaceLoss(groups, dim, **given)
    if g.loss == "cosface":
        return losses.CosFaceLoss(groups, dim, **given)
    return losses.NormalizedSoftmaxLoss(groups, dim, temperature=1.0 / (g.scale or DEFAULT_SCALE))


def build_miner(g: GroupsConfig, distance: str) -> Any:
    """None (every pair or triplet of the batch), or the miner the settings name."""
    from pytorch_metric_learning import miners

    if g.miner == "none":
        return None
    if g.loss == "contrastive":  # hard: the hardest positive and negative of each anchor
        return miners.BatchHardMiner(distance=pml_distance(distance))
    return miners.TripletMarginMiner(margin=g.margin if g.margin is not None else 0.05,
                                     type_of_triplets=g.miner, distance=pml_distance(distance))


def nearest_hits(out: torch.Tensor, y: torch.Tensor, distance: str) -> torch.Tensor:
    """Rows whose nearest other row in the batch is of their group."""
    import torch

    s = scores(out.detach().float(), out.detach().float(), distance)
    s.fill_diagonal_(-torch.inf)
    return (y[s.argmax(1)] == y).sum()


class Groups:
    """A projection to embedding_dim trained so that rows of a group are close."""

    def __init__(self, spec: WorkerSpec, device: torch.device):
        r = spec.recipe
        self.distance, self.ks, self.dim = r.loss.distance, r.evaluation.metrics_k, spec.head.width
        self.gathers = r.groups.loss in GATHERING
        self.criterion = build_loss(r.groups, r.loss.distance, spec.head.num_classes,
                                    spec.head.width).to(device)
        self.miner = build_miner(r.groups, r.loss.distance)

    def batch_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pairs = self.miner(out, y) if self.miner is not None else None
        return self.criterion(out, y, pairs)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from raycache._train.objectives.gather import gathered_loss

        return gathered_loss(self.batch_loss, out, y, self.gathers)

    def eval_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.batch_loss(out, y)

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nearest_hits(out, y, self.distance)

    def evaluator(self) -> Retrieval:
        return Retrieval(self.distance, self.ks, self.dim)


class Retrieval:
    """Retrieval over the validation rows of every worker (gathered, then ranked on each);
    val_acc is precision@1, the nearest other row's group being right."""

    def __init__(self, distance: str, ks: tuple[int, ...], dim: int):
        self.distance, self.ks, self.dim = distance, tuple(sorted(set(ks))), dim
        self.outs: list[torch.Tensor] = []
        self.ys: list[torch.Tensor] = []

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None:
        self.outs.append(out.float())
        self.ys.append(y)

    def compute(self) -> dict[str, float]:
        import torch

        from raycache._train.objectives.gather import all_gather
        from raycache._train.objectives.retrieval import metric_names, retrieval_metrics

        with torch.no_grad():
            emb = torch.cat(self.outs) if self.outs else torch.empty(0, self.dim)
            y = torch.cat(self.ys) if self.ys else torch.empty(0, dtype=torch.int64)
            emb, y = all_gather(emb.clone()), all_gather(y.clone())
            found = retrieval_metrics(emb, y, self.distance, tuple(sorted({1, *self.ks})))
        wanted = metric_names(self.ks)
        out = {f"val_{k}": v for k, v in found.items() if k in wanted}
        out["val_acc"] = found["precision_at_1"]
        return out


def problems(cfg: TrainConfig) -> list[str]:
    g, out = cfg.groups, []
    if cfg.loss.distance not in DISTANCES:
        out.append(f"distance={cfg.loss.distance!r}: expected one of {DISTANCES}")
    if g.loss not in LOSSES:
        return [*out, f"groups.loss={g.loss!r}: unknown; expected one of {LOSSES}"]
    miners = MINERS.get(g.loss, ("none",))
    if g.miner not in miners:
        out.append(f"groups.miner={g.miner!r}: {g.loss} takes one of {miners}; set "
                   "groups.miner to one of them (or leave it out)")
    if g.loss in ("infonce", "mnr") and cfg.loss.distance not in SIMILARITIES:
        out.append(f"distance={cfg.loss.distance!r}: groups.loss {g.loss} needs a similarity, "
                   f"one of {SIMILARITIES}")
    if g.scale is not None and g.scale <= 0:
        out.append(f"groups.scale={g.scale}: must be > 0, e.g. 20")
    if g.soft_margin and g.loss != "triplet":
        out.append(f"groups.soft_margin=true applies to the triplet loss only, not {g.loss}")
    return out


def out_dim(cfg: TrainConfig, groups: int) -> int:
    return cfg.embedding_dim


def metrics(cfg: TrainConfig) -> tuple[str, ...]:
    from raycache._train.objectives.retrieval import metric_names

    return tuple(f"val_{k}" for k in metric_names(tuple(sorted(set(cfg.evaluation.metrics_k)))))


GROUPS = Family(build=Groups, problems=problems, out_dim=out_dim, labels="groups",
                metrics=metrics)
