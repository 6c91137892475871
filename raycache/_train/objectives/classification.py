"""objective: classification: cross-entropy (label smoothing, class weights); accuracy, macro-F1
and top-k accuracy from per-class counts summed across DDP workers.

Counted here rather than with torchmetrics: its import alone takes ~4 s on a 2-core machine,
more than the whole of a warm 10-epoch run on a small cache, for what is a bincount and one
all_reduce (tests check the values against torchmetrics')."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache._train.objectives.base import Family

if TYPE_CHECKING:
    import torch

    from raycache._train.config import TrainConfig
    from raycache._train.runspec import WorkerSpec

__all__ = ["CLASSIFICATION", "Classification", "ClassMetrics"]


class Classification:
    """Logits over the label's classes."""

    gathers = False

    def __init__(self, spec: WorkerSpec, device: torch.device):
        import torch

        weight = (torch.tensor(spec.class_weights, dtype=torch.float32, device=device)
                  if spec.class_weights else None)
        self.criterion = torch.nn.CrossEntropyLoss(
            weight=weight, label_smoothing=spec.recipe.loss.label_smoothing).to(device)
        self.classes, self.device = spec.head.num_classes, device
        self.ks = spec.recipe.evaluation.metrics_k

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = self.criterion(out, y)
        return loss, loss.detach()

    def eval_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        return F.cross_entropy(out, y)

    def hits(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(-1) == y).sum()

    def evaluator(self, members: int = 1) -> ClassMetrics:
        """The head's metrics; `members`: those of that many heads at once (a stacked
        sweep's logits [B, members, C])."""
        return ClassMetrics(self.classes, self.ks, self.device, members)


class ClassMetrics:
    """val_f1 (macro over the classes present in labels or predictions, as torchmetrics and
    scikit-learn count it) and val_top{k}_acc for each k in metrics_k with 1 < k < classes;
    of one head, or of `members` heads at once (one row of counts each, summed in one
    all_reduce)."""

    def __init__(self, classes: int, ks: tuple[int, ...], device: torch.device,
                 members: int = 1):
        import torch

        self.classes = classes
        self.ks = tuple(k for k in sorted(set(ks)) if 1 < k < classes)
        # per head and class: true positives, predicted, actual; then a top-k hit count per k
        self.counts = torch.zeros(members, 3 * classes + len(self.ks), dtype=torch.float64,
                                  device=device)
        self.offsets = torch.arange(members, device=device) * classes

    def update(self, out: torch.Tensor, y: torch.Tensor) -> None:
        """Count a batch: logits [B, C] of one head, or [B, members, C]."""
        import torch

        out = out if out.dim() == 3 else out[:, None]
        c, m = self.classes, self.counts.shape[0]
        pred = out.argmax(-1)  # [B, members]
        flat = pred + self.offsets  # each head's classes in its own range
        self.counts[:, :c] += torch.bincount(flat[pred == y[:, None]], minlength=m * c
                                             )[:m * c].view(m, c)
        self.counts[:, c:2 * c] += torch.bincount(flat.flatten(), minlength=m * c
                                                  )[:m * c].view(m, c)
        self.counts[:, 2 * c:3 * c] += torch.bincount(y, minlength=c)[:c]
        for i, k in enumerate(self.ks):
            top = out.topk(k, dim=-1).indices
            self.counts[:, 3 * c + i] += (top == y[:, None, None]).any(-1).sum(0)

    def compute(self) -> dict[str, float]:
        """A collective under DDP: every worker's counts are summed first."""
        return self.compute_each()[0]

    def compute_each(self) -> list[dict[str, float]]:
        """Each head's metrics (a collective under DDP, once for every head)."""
        import torch.distributed as dist

        counts = self.counts.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(counts)
        c = self.classes
        tp, predicted, actual = counts[:, :c], counts[:, c:2 * c], counts[:, 2 * c:3 * c]
        columns: dict[str, list[float]] = {}
        if c >= 2:
            present = (predicted + actual) > 0
            f1 = 2 * tp / (predicted + actual).clamp(min=1)
            columns["val_f1"] = ((f1 * present).sum(1) / present.sum(1).clamp(min=1)).tolist()
        rows = actual.sum(1).clamp(min=1)
        for i, k in enumerate(self.ks):
            columns[f"val_top{k}_acc"] = (counts[:, 3 * c + i] / rows).tolist()
        return [{name: values[j] for name, values in columns.items()}
                for j in range(counts.shape[0])]


def problems(cfg: TrainConfig) -> list[str]:
    return []


def out_dim(cfg: TrainConfig, classes: int) -> int:
    return classes


def metrics(cfg: TrainConfig) -> tuple[str, ...]:
    """val_f1, and val_top{k}_acc for each k > 1 (those at or above the class count are left
    out when the run knows it)."""
    return ("val_f1", *(f"val_top{k}_acc" for k in sorted(set(cfg.evaluation.metrics_k))
                        if k > 1))


CLASSIFICATION = Family(build=Classification, problems=problems, out_dim=out_dim,
                        labels="classes", metrics=metrics)
