"""raycache: compute frozen-encoder outputs once on Ray, cache them as Parquet, train heads on them.

The SDK:

    import raycache
    result = raycache.fill("fill.yaml")           # or a dict, or a FillConfig
    cache = raycache.open_cache("docs")           # manifest, to_pandas(), to_ray_dataset()
    run = raycache.train({"cache": "docs", "epochs": 10})
"""

from raycache.cache import Cache, ls, open_cache
from raycache.config import (
    EncoderConfig,
    FillConfig,
    SourceConfig,
    StoreConfig,
    TrainConfig,
)
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
from raycache.manifest import Manifest
from raycache.predict import Head, load_head
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
    "Manifest",
    "RaycacheError",
    "SourceConfig",
    "SourceError",
    "StoreConfig",
    "StoreError",
    "TrainConfig",
    "TrainResult",
    "fill",
    "load_head",
    "ls",
    "open_cache",
    "train",
]
