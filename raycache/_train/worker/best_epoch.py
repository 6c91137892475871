"""Which epoch each head keeps (best on `monitor`, early stopping), and a sweep's leader."""

from __future__ import annotations

import math
from typing import Any

from raycache._errors import ConfigError
from raycache._train.worker.heads import Kit, Progress, WorkerHeads

__all__ = ["end_sweep_epoch", "saved_epoch", "serves_best", "score", "sweep_rows",
           "track_best"]


def track_best(kit: Kit, progress: Progress, metrics: dict[str, Any]) -> None:
    """Best epoch on the monitored metric (its weights kept), and early stopping."""
    r = kit.spec.recipe
    value = metrics.get(r.evaluation.monitor)
    if value is None:
        raise ConfigError([f"evaluation.monitor={r.evaluation.monitor!r} is not a metric of "
                           f"objective {r.objective!r}; expected one of "
                           f"{sorted(k for k in metrics if k != 'placement')}"])
    if progress.best is None or r.better(value, progress.best):
        progress.best, progress.best_epoch, progress.bad_epochs = value, metrics["epoch"], 0
        kit.best_weights = {k: v.detach().cpu().clone()
                            for k, v in kit.base.state_dict().items()}
    else:
        progress.bad_epochs += 1
        ev = r.evaluation
        progress.stopped = (ev.early_stopping and progress.bad_epochs >= ev.patience
                            and metrics["epoch"] >= r.loop.min_epochs)
    kit.schedule.step_epoch(value, r.better)


def serves_best(kit: Kit) -> bool:
    """Whether the head's checkpoint serves its best epoch's weights (evaluation.weights)."""
    return kit.spec.recipe.evaluation.weights == "best" and kit.best_weights is not None


def saved_epoch(kit: Kit, progress: Progress) -> dict[str, Any]:
    """The metrics of the epoch whose weights a head saves: its best (evaluation.weights:
    best), else its last."""
    epoch = progress.best_epoch if serves_best(kit) else progress.history[-1]["epoch"]
    return next(m for m in progress.history if m["epoch"] == epoch)


def score(heads: WorkerHeads, i: int) -> float:
    """Member i's value of the select metric, at the epoch whose weights it saves; a member
    that diverged is never picked (its weights are not finite): the worst value."""
    spec = heads.spec
    if heads.progress[i].diverged or not heads.progress[i].history:
        return math.inf if spec.select_mode == "min" else -math.inf
    metrics = saved_epoch(heads.members[i], heads.progress[i])
    if spec.select not in metrics:
        raise ConfigError([f"select={spec.select!r} is not a metric; expected one of "
                           f"{sorted(k for k in metrics if k != 'placement')}"])
    return metrics[spec.select]


def end_sweep_epoch(heads: WorkerHeads, latest: list[dict[str, Any]]) -> None:
    """A sweep's run-level progress after an epoch: the leader by the select metric, whose
    metrics this epoch are the run's; stopped when every member has stopped."""
    spec, run = heads.spec, heads.run
    scores = [score(heads, i) for i in range(len(heads.members))]
    pick = max if spec.select_mode == "max" else min
    heads.leader = scores.index(pick(scores))
    lead = saved_epoch(heads.members[heads.leader], heads.progress[heads.leader])
    run.epoch += 1
    run.history.append({**latest[heads.leader], "member": heads.leader,
                        "active": sum(not p.stopped for p in heads.progress),
                        "diverged": sum(bool(p.diverged) for p in heads.progress),
                        "leader_best": scores[heads.leader], "leader_epoch": lead["epoch"]})
    run.best, run.best_epoch = scores[heads.leader], lead["epoch"]
    run.stopped = all(p.stopped for p in heads.progress)


def sweep_rows(heads: WorkerHeads) -> list[dict[str, Any]]:
    """One record per member: its settings, score, best epoch, last metrics and history."""
    out = []
    for i, (m, progress) in enumerate(zip(heads.spec.sweep, heads.progress, strict=True)):
        value = score(heads, i)
        out.append({
            "member": i, "settings": m.settings_dict(),
            heads.spec.select: value if math.isfinite(value) else None,
            "epoch": saved_epoch(heads.members[i], progress)["epoch"] if progress.history
            else 0,
            "selected": i == heads.leader, "stopped": progress.stopped,
            "diverged": progress.diverged, "epochs": len(progress.history),
            "metrics": {k: v for k, v in (progress.history or [{}])[-1].items()
                        if k != "placement"},
            "history": progress.history})
    return out
