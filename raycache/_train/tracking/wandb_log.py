"""The `wandb` tracker: each epoch's metrics logged to a Weights & Biases run as it ends (the
settings of Ray's `ray.air.integrations.wandb.WandbLoggerCallback`: project, group, and
wandb.init's own: entity, mode, dir, tags), offline where `mode: offline` or $WANDB_MODE says."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._train.tracking.hook import RunContext, TrainCallback, scalars

__all__ = ["WandbSettings", "WandbTracker"]


@dataclass(frozen=True)
class WandbSettings:
    """tracking: [{kind: wandb, ...}]: where the run goes."""

    project: str | None = None
    """The W&B project; None: the cache's name."""
    group: str | None = None
    """A group of runs (W&B's `group`)."""
    entity: str | None = None
    """The team or user; None: W&B's default for the login."""
    mode: str | None = None
    """online, offline or disabled; None: $WANDB_MODE, else online."""
    dir: str | None = None
    """Where W&B writes its files (offline runs: until `wandb sync`); None: W&B's default."""
    name: str | None = None
    """The W&B run's name; None: raycache's run name."""
    tags: list[str] = field(default_factory=list)
    """Tags of the W&B run."""


class WandbTracker(TrainCallback):
    """The settings as the run's config, metrics per epoch (step: the epoch), then finish."""

    settings = WandbSettings

    def __init__(self, **settings: Any) -> None:
        self.s = WandbSettings(**settings)
        self.run: Any = None

    def before_run(self, run_context: RunContext) -> None:
        import wandb

        self.run = wandb.init(
            project=self.s.project or run_context.cache, group=self.s.group,
            entity=self.s.entity, mode=self.s.mode, dir=self.s.dir,
            name=self.s.name or run_context.run_name, tags=list(self.s.tags) or None,
            config={**run_context.config, "raycache.run_dir": run_context.run_dir},
            reinit="create_new")

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: str | None) -> None:
        m = metrics[0]
        self.run.log({**scalars(m), "epoch": int(m["epoch"])}, step=int(m["epoch"]))

    def after_exception(self, run_context: RunContext, error: BaseException) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1)

    def after_run(self, run_context: RunContext, history: list[dict[str, Any]]) -> None:
        self.run.finish()
