"""objective: classification: cross-entropy (label smoothing, class weights); accuracy, macro-F1
and top-k accuracy from per-class counts summed across DDP workers.

Counted here rather than with torchmetrics: its import alone takes ~4 s on a 2-core machine,
more than the whole of a warm 10-epoch run on a small cache, for what is a bincount and one
all_reduce (tests check the values against torchmetrics')."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache.objectives.base import Family

if TYPE_CHECKING:
    import torch

    from raycache.config import TrainConfig
    from raycache.runspec import RunSpec

__all__ = ["CLASSIFICATION", "Classification", "ClassMetrics"]


class Classification:
    """Logits over the label's classes."""

    gathers = False

    def __init__(self, spec: RunSpec, device: torch.device):
        import torch

        weight = (torch.tensor(spec.class_weights, dtype=torch.float32, device=device)
                  if spec.class_weights else None)
        self.criterion = torch.nn.CrossEntropyLoss(
            weight=weight, label_smoothing=spec.recipe.label_smoothing).to(device)
        self.classes, self.ks, self.device = spec.head.num_classes, spec.recipe.metrics_k, device

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = self.criterion(out, y)
        return loss, loss.detach()

    def eval_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        return F.cross_entropy(out, y)

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(-1) == y).sum()

    def evaluator(self) -> ClassMetrics:
        return ClassMetrics(self.classes, self.ks, self.device)


class ClassMetrics:
    """val_f1 (macro over the classes present in labels or predictions, as torchmetrics and
    scikit-learn count it) and val_top{k}_acc for each k in metrics_k with 1 < k < classes."""

    def __init__(self, classes: int, ks: tuple[int, ...], device: torch.device):
        import torch

        self.classes = classes
        self.ks = tuple(k for k in sorted(set(ks)) if 1 < k < classes)
        # per class: true positives, predicted, actual; then one top-k hit count per k
        self.counts = torch.zeros(3 * classes + len(self.ks), dtype=torch.float64, device=device)

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None:
        import torch

        c, pred = self.classes, out.argmax(-1)
        self.counts[:c] += torch.bincount(y[pred == y], minlength=c)[:c]
        self.counts[c:2 * c] += torch.bincount(pred, minlength=c)[:c]
        self.counts[2 * c:3 * c] += torch.bincount(y, minlength=c)[:c]
        for i, k in enumerate(self.ks):
            top = out.topk(k, dim=-1).indices
            self.counts[3 * c + i] += (top == y[:, None]).any(-1).sum()

    def compute(self) -> dict[str, float]:
        """A collective under DDP: every worker's counts are summed first."""
        import torch.distributed as dist

        counts = self.counts.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts)
        c = self.classes
        tp, predicted, actual = counts[:c], counts[c:2 * c], counts[2 * c:3 * c]
        out: dict[str, float] = {}
        if c >= 2:
            present = (predicted + actual) > 0
            f1 = 2 * tp / (predicted + actual).clamp(min=1)
            out["val_f1"] = float(f1[present].mean()) if present.any() else 0.0
        rows = max(float(actual.sum()), 1.0)
        for i, k in enumerate(self.ks):
            out[f"val_top{k}_acc"] = float(counts[3 * c + i]) / rows
        return out


def problems(cfg: TrainConfig) -> list[str]:
    return []


def out_dim(cfg: TrainConfig, classes: int) -> int:
    return classes


CLASSIFICATION = Family(build=Classification, problems=problems, out_dim=out_dim,
                        labels="classes")
