"""Fill then train as one run: the train section defaults its cache and store to the fill's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raycache.config import FillConfig, TrainConfig, load
from raycache.errors import ConfigError
from raycache.fill import FillResult, fill
from raycache.train import TrainResult, train


@dataclass
class PipelineResult:
    fill: FillResult
    train: TrainResult

    def summary(self) -> str:
        return f"{self.fill.summary()}\n{self.train.summary()}"


def configs(config: dict[str, Any] | str | Path) -> tuple[FillConfig, TrainConfig]:
    """Both configs, checked before any work starts."""
    if isinstance(config, str | Path):
        path = Path(config)
        if not path.is_file():
            raise ConfigError([f"config file {str(path)!r} does not exist; check the path"])
        config = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(config) - {"fill", "train"})
    if unknown or "fill" not in config:
        raise ConfigError([f"pipeline config: expected sections 'fill' and 'train', got "
                           f"{sorted(config)}"])
    fill_cfg = load(FillConfig, config["fill"])
    train_dict = {"cache": fill_cfg.name, "store": config["fill"].get("store", {}),
                  **(config.get("train") or {})}
    return fill_cfg, load(TrainConfig, train_dict)


def pipeline(config: dict[str, Any] | str | Path, *, progress: bool | None = None
             ) -> PipelineResult:
    """Fill (or hit) the cache, then train a head on exactly that fill."""
    fill_cfg, train_cfg = configs(config)
    filled = fill(fill_cfg, progress=progress)
    print(filled.summary(), flush=True)
    train_cfg.fingerprint = filled.cache.fingerprint
    return PipelineResult(filled, train(train_cfg, progress=progress))
