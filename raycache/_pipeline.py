"""Fill then train as one run: the train section defaults its cache and store to the fill's;
with overlap: true, training starts on the fill's shards while it is still encoding."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raycache._core.config import read_yaml
from raycache._errors import ConfigError, CorruptCache
from raycache._fill.config import FillConfig
from raycache._fill.plan import load_config as load_fill
from raycache._fill.run import FillResult, fill
from raycache._train.config import TrainConfig
from raycache._train.plan import load_config as load_train
from raycache._train.run import TrainResult, train

__all__ = ["PipelineResult", "configs", "document", "pipeline"]

SECTIONS = ("fill", "train", "overlap")


@dataclass
class PipelineResult:
    fill: FillResult
    train: TrainResult

    def summary(self) -> str:
        return f"{self.fill.summary()}\n{self.train.summary()}"


def document(config: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The pipeline config as a dict (read from YAML where it is a path), its sections checked.
    overlap: true trains while the fill encodes (raycache._train.data.overlap); false (the
    default) fills first."""
    if isinstance(config, str | Path):
        path = Path(config)
        if not path.is_file():
            raise ConfigError([f"config file {str(path)!r} does not exist; check the path"])
        config = read_yaml(path)
    if not isinstance(config, dict):
        raise ConfigError([f"pipeline config: expected a mapping of sections 'fill' and "
                           f"'train', got {type(config).__name__} {config!r}"])
    unknown = sorted(set(config) - set(SECTIONS))
    if unknown or "fill" not in config:
        raise ConfigError([f"pipeline config: expected sections 'fill' and 'train' (and "
                           f"'overlap'), got {sorted(config)}"])
    if not isinstance(config.get("overlap", False), bool):
        raise ConfigError([f"overlap={config['overlap']!r}: expected true (train while the "
                           "fill encodes) or false (fill first)"])
    return config


def configs(config: dict[str, Any] | str | Path) -> tuple[FillConfig, TrainConfig]:
    """Both configs, checked before any work starts."""
    config = document(config)
    fill_cfg = load_fill(config["fill"])
    train_dict = {"cache": fill_cfg.name, "store": config["fill"].get("store", {}),
                  **(config.get("train") or {})}
    return fill_cfg, load_train(train_dict)


def pipeline(config: dict[str, Any] | str | Path, *, progress: bool | None = None
             ) -> PipelineResult:
    """Fill (or hit) the cache, then train a head on exactly that fill; with overlap: true,
    the first epoch trains on the fill's shards as they are written."""
    fill_cfg, train_cfg = configs(config)
    if document(config).get("overlap"):
        return overlapped(fill_cfg, train_cfg, progress)
    filled = fill(fill_cfg, progress=progress)
    print(filled.summary(), flush=True)
    train_cfg.fingerprint = filled.cache.fingerprint
    return PipelineResult(filled, train(train_cfg, progress=progress))


def overlapped(fill_cfg: FillConfig, train_cfg: TrainConfig, progress: bool | None
               ) -> PipelineResult:
    """The fill in a background thread, training's first epoch on its shards as they land
    (raycache._train.data.overlap); a cache already committed is trained on as usual. A
    training error waits for the fill to end, so that its work is committed (or resumable)."""
    from raycache._cache.committed import read_manifest
    from raycache._fill.plan import plan
    from raycache._train.data.overlap import OverlapFill, problems

    if progress is not None:
        fill_cfg = dataclasses.replace(fill_cfg, progress=progress)
    bad = problems(train_cfg)
    if bad:
        raise ConfigError(bad)
    p = plan(fill_cfg)
    train_cfg.fingerprint = p.fingerprint
    try:
        hit = read_manifest(p.store, p.dir) is not None
    except CorruptCache:  # damaged: fill() fills it again, with a warning
        hit = True
    if hit:  # nothing to overlap with
        filled = fill(fill_cfg)
        print(filled.summary(), flush=True)
        return PipelineResult(filled, train(train_cfg, progress=progress))
    landing = OverlapFill.start(p, train_cfg.verify)
    try:
        trained = train(train_cfg, progress=progress, landing=landing)
    finally:
        landing.close()
    filled = landing.result()
    print(filled.summary(), flush=True)
    return PipelineResult(filled, trained)
