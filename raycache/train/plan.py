"""A training config checked against the registries it names: heads, optimizers, schedules,
objectives and the sweep (above both the config and the registries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raycache.core.config import load
from raycache.heads import HEADS
from raycache.train.config import TrainConfig

__all__ = ["load_config", "problems"]


def problems(cfg: TrainConfig) -> list[str]:
    """The checks of `cfg` that consult the registries, a sweep's members included."""
    from raycache.train.objectives import OBJECTIVES
    from raycache.train.optim import OPTIMIZERS, SCHEDULES
    from raycache.train.sweep.grid import problems as sweep_problems

    out = []
    if cfg.head not in HEADS and ":" not in cfg.head:
        out.append(f"head={cfg.head!r}: unknown; expected one of {sorted(HEADS)} "
                   "or 'package.module:function'")
    if cfg.optim.optimizer not in OPTIMIZERS:
        out.append(f"optimizer={cfg.optim.optimizer!r}: expected one of {sorted(OPTIMIZERS)}")
    if cfg.schedule.kind not in SCHEDULES:
        out.append(f"schedule={cfg.schedule.kind!r}: expected one of {sorted(SCHEDULES)}")
    if cfg.objective not in OBJECTIVES:
        out.append(f"objective={cfg.objective!r}: unknown; expected one of "
                   f"{sorted(OBJECTIVES)}")
    else:
        out += OBJECTIVES[cfg.objective].problems(cfg)
    return out + sweep_problems(cfg, check)


def check(cfg: TrainConfig) -> list[str]:
    """Every problem of `cfg`: its local checks and those against the registries."""
    return cfg.problems() + problems(cfg)


def load_config(data: TrainConfig | dict[str, Any] | str | Path) -> TrainConfig:
    """A TrainConfig from a dict, a YAML path or an instance, every problem in one ConfigError."""
    return load(TrainConfig, data, problems)
