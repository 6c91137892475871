"""The callback hook of a training run, in the shape of Ray Train's `UserCallback`
(`after_report(run_context, metrics, checkpoint)`), called by rank 0 as each epoch ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunContext", "TrainCallback", "params"]


@dataclass(frozen=True)
class RunContext:
    """What a callback is told of the run it follows (Ray Train's `TrainRunContext`).

    Example:
        ```python
        class Named(raycache.TrainCallback):
            def before_run(self, run_context):
                print(run_context.run_name, run_context.cache, run_context.config["optim.lr"])
        ```
    """

    run_name: str
    """The run folder's name under the cache's runs/ (what `raycache runs` lists)."""
    run_dir: str
    """The run folder in the store's filesystem form."""
    cache: str
    """The cache trained on."""
    epochs: int
    """The most epochs the run trains (early stopping may end it sooner)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's settings, flattened to `group.key` (every auto resolved): `params`."""


class TrainCallback:
    """A run's callback: subclass it and override what you need (each a no-op here).

    Ray Train calls its `UserCallback`s on the controller after every `ray.train.report`;
    raycache calls these in rank 0's process (the driver for a run in this process, the first
    DDP worker otherwise) after every epoch, with that epoch's metrics reduced over every
    worker. `TrainConfig.tracking` names them: `mlflow`, `wandb`, or a
    `package.module:Class` of your own (made with its settings as keyword arguments).

    Example:
        ```python
        class Printer(raycache.TrainCallback):
            def after_report(self, run_context, metrics, checkpoint):
                print(run_context.run_name, metrics[0]["epoch"], metrics[0]["val_acc"])

        # in a module of yours, then: tracking: [{kind: "mymodule:Printer"}]
        ```
    """

    def before_run(self, run_context: RunContext) -> None:
        """Called once before the first epoch (a resumed run: before its next epoch).

        Args:
            run_context: The run.
        """

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: str | None) -> None:
        """Called as each epoch ends, after metrics.jsonl holds it.

        Args:
            run_context: The run.
            metrics: One dict, the epoch's metrics (all-reduced over the workers; Ray passes
                one per worker).
            checkpoint: The checkpoint folder this epoch saved, None where it saved none.
        """

    def after_exception(self, run_context: RunContext, error: BaseException) -> None:
        """Called when the run fails, before the error reaches the caller.

        Args:
            run_context: The run.
            error: What stopped it.
        """

    def after_run(self, run_context: RunContext, history: list[dict[str, Any]]) -> None:
        """Called once after the last epoch.

        Args:
            run_context: The run.
            history: Every epoch's metrics, in order.
        """


def params(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested settings dict flattened to `group.key` -> value (lists as their text), what
    MLflow's params and a W&B run's config hold."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(params(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, int | float | str | bool) or value is None \
                else str(list(value) if isinstance(value, tuple) else value)
    return out


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The epoch's numeric metrics (the epoch itself is the step)."""
    return {k: float(v) for k, v in metrics.items()
            if k != "epoch" and isinstance(v, int | float) and not isinstance(v, bool)}
