"""Live experiment tracking: the callback hook (`TrainCallback`, Ray Train's `UserCallback`
shape) and the `TRACKERS` registry of integrations that `TrainConfig.tracking` turns on."""

from raycache._train.tracking.hook import RunContext, TrainCallback
from raycache._train.tracking.mlflow_log import MLflowTracker
from raycache._train.tracking.wandb_log import WandbTracker

TRACKERS: dict[str, type[TrainCallback]] = {"mlflow": MLflowTracker, "wandb": WandbTracker}
"""tracking kind -> its callback class (each with a `settings` dataclass of what it takes)."""
PACKAGES: dict[str, str] = {"mlflow": "mlflow", "wandb": "wandb"}
"""tracking kind -> the module it imports (from the `tracking` extra)."""

__all__ = ["PACKAGES", "TRACKERS", "RunContext", "TrainCallback"]
