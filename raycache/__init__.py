"""raycache: compute frozen-encoder outputs once on Ray, cache them as Parquet, train heads on them.

The SDK:

    import raycache
    result = raycache.fill("fill.yaml")           # or a dict, or a FillConfig
    cache = raycache.open_cache("docs")           # manifest, to_pandas(), to_ray_dataset()
    raycache.verify(cache).ok                     # every shard checked against the manifest
    raycache.gc(keep_last=2, delete=True)         # unfinished fills, old fingerprints
    run = raycache.train({"cache": "docs", "epochs": 10})
    raycache.predict_file({"checkpoint": run.checkpoint, "input": "new.jsonl",
                           "output": "predictions.parquet"})

`import raycache` stays light: no Ray, no torch until a fill, a train or a Head needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raycache.cache import Cache, ls, open_cache
from raycache.config import EncoderConfig, FillConfig, SourceConfig, StoreConfig, TrainConfig
from raycache.errors import (
    CacheNotFound,
    ConfigError,
    CorruptShard,
    EncoderError,
    FillFailed,
    FingerprintError,
    RaycacheError,
    SourceError,
    StoreError,
)
from raycache.fill import FillResult, fill
from raycache.heads import HeadSpec
from raycache.integrity import Report, verify
from raycache.manifest import Manifest
from raycache.predict_file import PredictConfig, PredictResult, predict_file
from raycache.repair import repair
from raycache.retention import GcResult, gc
from raycache.runs import RunInfo, list_runs
from raycache.runspec import RunSpec
from raycache.train import TrainResult, train
from raycache.usage import Usage, du

__all__ = [
    "Cache",
    "CacheNotFound",
    "ConfigError",
    "CorruptShard",
    "EncoderConfig",
    "EncoderError",
    "FillConfig",
    "FillFailed",
    "FillResult",
    "FingerprintError",
    "GcResult",
    "Head",
    "HeadSpec",
    "Manifest",
    "PredictConfig",
    "PredictResult",
    "RaycacheError",
    "Report",
    "RunInfo",
    "RunSpec",
    "SourceConfig",
    "SourceError",
    "StoreConfig",
    "StoreError",
    "TrainConfig",
    "TrainResult",
    "Usage",
    "du",
    "fill",
    "gc",
    "list_runs",
    "load_head",
    "ls",
    "open_cache",
    "predict_file",
    "repair",
    "train",
    "verify",
]


_LAZY = {"Head": "raycache.predict", "load_head": "raycache.predict"}
"""Names whose modules import torch: loaded on first use."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'raycache' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from raycache.predict import Head, load_head
