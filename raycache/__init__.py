"""raycache: compute frozen-encoder outputs once on Ray, cache them as Parquet, train heads on them.

The SDK:

    import raycache
    result = raycache.fill("fill.yaml")           # or a dict, or a FillConfig
    cache = raycache.open_cache("docs")           # manifest, to_pandas(), to_ray_dataset()
    run = raycache.train({"cache": "docs", "epochs": 10})

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
    EncoderError,
    FingerprintError,
    RaycacheError,
    SourceError,
    StoreError,
)
from raycache.fill import FillResult, fill
from raycache.heads import HeadSpec
from raycache.manifest import Manifest
from raycache.runs import RunInfo, list_runs
from raycache.runspec import RunSpec
from raycache.train import TrainResult, train

__all__ = [
    "Cache",
    "CacheNotFound",
    "ConfigError",
    "EncoderConfig",
    "EncoderError",
    "FillConfig",
    "FillResult",
    "FingerprintError",
    "Head",
    "HeadSpec",
    "Manifest",
    "RaycacheError",
    "RunInfo",
    "RunSpec",
    "SourceConfig",
    "SourceError",
    "StoreConfig",
    "StoreError",
    "TrainConfig",
    "TrainResult",
    "fill",
    "list_runs",
    "load_head",
    "ls",
    "open_cache",
    "train",
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
