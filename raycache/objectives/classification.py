"""objective: classification: cross-entropy (label smoothing, class weights); accuracy, macro-F1
and top-k accuracy from torchmetrics (which sync across DDP workers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    """val_f1 (macro) and val_top{k}_acc for each k in metrics_k with 1 < k < classes."""

    def __init__(self, classes: int, ks: tuple[int, ...], device: torch.device):
        from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

        self.metrics: dict[str, Any] = {}
        if classes >= 2:
            self.metrics["val_f1"] = MulticlassF1Score(num_classes=classes, average="macro")
        for k in sorted(set(ks)):
            if 1 < k < classes:
                self.metrics[f"val_top{k}_acc"] = MulticlassAccuracy(
                    num_classes=classes, top_k=k, average="micro")
        for m in self.metrics.values():
            m.to(device)

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None:
        for m in self.metrics.values():
            m.update(out, y)

    def compute(self) -> dict[str, float]:
        return {name: float(m.compute()) for name, m in self.metrics.items()}


def problems(cfg: TrainConfig) -> list[str]:
    return []


def out_dim(cfg: TrainConfig, classes: int) -> int:
    return classes


CLASSIFICATION = Family(build=Classification, problems=problems, out_dim=out_dim,
                        labels="classes")
