"""TrainConfig, the one config of a training run (`train`), and its groups: the recipe's
(`recipe`: loop, optim, schedule, loss, evaluation, checkpoint, resources) and the similarity
objectives' (`similarity`: groups, pairs)."""

from raycache._train.config.train import (
    FLAT,
    GROUPS,
    MONITOR_MODES,
    PLACEMENTS,
    SOLVERS,
    TRAIN_PRECISIONS,
    CheckpointConfig,
    EvalConfig,
    GroupsConfig,
    LoopConfig,
    LossConfig,
    OptimConfig,
    PairsConfig,
    ResourcesConfig,
    ScheduleConfig,
    TrainConfig,
    regroup,
    sweepable,
)

__all__ = ["FLAT", "GROUPS", "MONITOR_MODES", "PLACEMENTS", "SOLVERS", "TRAIN_PRECISIONS",
           "CheckpointConfig", "EvalConfig", "GroupsConfig", "LoopConfig", "LossConfig",
           "OptimConfig", "PairsConfig", "ResourcesConfig", "ScheduleConfig", "TrainConfig",
           "regroup", "sweepable"]
