"""raycache: compute frozen-encoder outputs once on Ray, cache them as Parquet, train heads on them.

The SDK:

    import raycache
    result = raycache.fill("fill.yaml")           # or a dict, or a FillConfig
    cache = raycache.open_cache("docs")           # manifest, to_pandas(), to_ray_dataset()
    raycache.verify(cache).ok                     # every shard checked against the manifest
    raycache.gc(retain=2, delete=True)            # unfinished fills, old fingerprints
    raycache.compact("docs")                      # rewrite a version's sparse shared shards
    raycache.export("docs", "docs.parquet")       # a version's rows: Parquet, Lance, Qdrant
    run = raycache.train({"cache": "docs", "epochs": 10})
    raycache.predict_file({"checkpoint": run.checkpoint, "input": "new.jsonl",
                           "output": "predictions.parquet"})
    probed = raycache.probe({"caches": ["docs"], "methods": ["logreg", "knn", "linear"]})
    probed.table, probed.per_class, probed.best   # which encoder, which head
    raycache.evaluate(run.checkpoint, "test.jsonl").table()  # per-class scores, confusion
    raycache.export_head(run.checkpoint, "st-folder")  # a sentence-transformers folder
    raycache.serve({"checkpoint": run.checkpoint})     # HTTP, on Ray Serve

`import raycache` stays light: no Ray, no torch until a fill, a train or a Head needs them.

The names in `__all__` are raycache's public surface, documented in the reference (docs/reference/);
every module under a `_` name is internal and may change in any release.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raycache import _moved
from raycache._core.notebook import quiet_widget_notices
from raycache._core.version import package_version
from raycache._errors import (
    BadInput,
    CacheNotFound,
    ConfigError,
    CorruptCache,
    CorruptShard,
    DamagedCacheWarning,
    DivergedError,
    EncoderError,
    FillFailed,
    FingerprintError,
    KeptRowsWarning,
    MissingExtra,
    RaycacheError,
    SourceError,
    StoreError,
    StoreUnavailable,
    UntrustedCode,
)

__version__ = package_version()
"""The installed raycache's version (its package metadata); `raycache --version` prints it."""

quiet_widget_notices()  # before anything imports Ray or tqdm.auto
_moved.install()  # the old paths of public names: kept until 0.3, the rest refused

__all__ = [
    "BadInput",
    "Batching",
    "Cache",
    "CacheNotFound",
    "CheckpointConfig",
    "ConfigError",
    "CorruptCache",
    "CorruptShard",
    "DamagedCacheWarning",
    "DivergedError",
    "Duplicates",
    "EncoderConfig",
    "EncoderEntry",
    "EncoderError",
    "EvalConfig",
    "Evaluation",
    "ExportResult",
    "FillConfig",
    "FillFailed",
    "FillResult",
    "FingerprintError",
    "GcResult",
    "GroupsConfig",
    "Head",
    "HeadSpec",
    "Inputs",
    "KeptRowsWarning",
    "KnnConfig",
    "LogregConfig",
    "LoopConfig",
    "LossConfig",
    "Manifest",
    "MissingExtra",
    "OptimConfig",
    "Outcome",
    "PairsConfig",
    "PipelineResult",
    "Place",
    "PoolConfig",
    "PredictConfig",
    "PredictResult",
    "ProbeConfig",
    "ProbeHeadsConfig",
    "ProbeResult",
    "RaycacheError",
    "ReadOnlyStore",
    "Recipe",
    "Removal",
    "Report",
    "ResourcesConfig",
    "RowRange",
    "RunContext",
    "RunInfo",
    "RunSpec",
    "ScheduleConfig",
    "ServeConfig",
    "ShardEntry",
    "SkippedRow",
    "SourceConfig",
    "SourceError",
    "StoreConfig",
    "StoreError",
    "StoreUnavailable",
    "Stray",
    "TrainCallback",
    "TrainConfig",
    "TrainResult",
    "UntrustedCode",
    "Usage",
    "ViewsConfig",
    "compact",
    "du",
    "evaluate",
    "export",
    "export_head",
    "fill",
    "gc",
    "list_runs",
    "load_head",
    "ls",
    "open_cache",
    "pipeline",
    "predict_file",
    "probe",
    "repair",
    "retrieval_metrics",
    "serve",
    "serve_app",
    "stdlib_docs",
    "train",
    "verify",
]


_LAZY = {
    "Cache": "raycache._cache.committed",
    "StoreConfig": "raycache._cache.config",
    "ls": "raycache._cache.finding",
    "open_cache": "raycache._cache.finding",
    "ReadOnlyStore": "raycache._cache.opened",
    "EncoderEntry": "raycache._cache.manifest",
    "Manifest": "raycache._cache.manifest",
    "Place": "raycache._cache.order",
    "RowRange": "raycache._cache.records",
    "ShardEntry": "raycache._cache.records",
    "SkippedRow": "raycache._cache.records",
    "PoolConfig": "raycache._compute.pool_config",
    "Batching": "raycache._encoders.batching",
    "EncoderConfig": "raycache._encoders.config",
    "ExportResult": "raycache._export.run",
    "export": "raycache._export.run",
    "FillConfig": "raycache._fill.config",
    "ViewsConfig": "raycache._fill.config",
    "FillResult": "raycache._fill.run",
    "fill": "raycache._fill.run",
    "HeadSpec": "raycache._heads.specs",
    "PipelineResult": "raycache._pipeline",
    "pipeline": "raycache._pipeline",
    "PredictConfig": "raycache._predict.config",
    "evaluate": "raycache._predict.evaluate",
    "Evaluation": "raycache._predict.evaluation",
    "PredictResult": "raycache._predict.run",
    "predict_file": "raycache._predict.run",
    "KnnConfig": "raycache._probe.config",
    "LogregConfig": "raycache._probe.config",
    "ProbeConfig": "raycache._probe.config",
    "ProbeHeadsConfig": "raycache._probe.config",
    "Outcome": "raycache._probe.result",
    "ProbeResult": "raycache._probe.result",
    "probe": "raycache._pipeline",
    "ServeConfig": "raycache._serve.config",
    "serve": "raycache._serve.run",
    "serve_app": "raycache._serve.run",
    "export_head": "raycache._serve.st_export",
    "SourceConfig": "raycache._source.config",
    "CheckpointConfig": "raycache._train.config",
    "EvalConfig": "raycache._train.config",
    "GroupsConfig": "raycache._train.config",
    "LoopConfig": "raycache._train.config",
    "LossConfig": "raycache._train.config",
    "OptimConfig": "raycache._train.config",
    "PairsConfig": "raycache._train.config",
    "ResourcesConfig": "raycache._train.config",
    "ScheduleConfig": "raycache._train.config",
    "TrainConfig": "raycache._train.config",
    "TrainResult": "raycache._train.driver.run",
    "train": "raycache._train.driver.run",
    "RunInfo": "raycache._train.folder.record",
    "list_runs": "raycache._train.folder.record",
    "Recipe": "raycache._train.runspec",
    "RunSpec": "raycache._train.runspec",
    "RunContext": "raycache._train.tracking.hook",
    "TrainCallback": "raycache._train.tracking.hook",
    "compact": "raycache._upkeep.compact",
    "Usage": "raycache._upkeep.du",
    "du": "raycache._upkeep.du",
    "GcResult": "raycache._upkeep.gc",
    "Stray": "raycache._upkeep.gc",
    "gc": "raycache._upkeep.gc",
    "repair": "raycache._upkeep.repair",
    "Removal": "raycache._upkeep.removal",
    "Duplicates": "raycache._upkeep.verify",
    "Report": "raycache._upkeep.verify",
    "verify": "raycache._upkeep.verify",
    "Head": "raycache._heads.loaded", "Inputs": "raycache._heads.joint",
    "load_head": "raycache._heads.loaded",
    "retrieval_metrics": "raycache._train.objectives.retrieval",
    "stdlib_docs": "raycache._source.demo_data",
}
"""Where each public name lives, imported on first use: `import raycache` (and so every Ray
worker process that unpickles one of its stages) loads only what it touches."""


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'raycache' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._cache.config import StoreConfig
    from raycache._cache.finding import ls, open_cache
    from raycache._cache.manifest import EncoderEntry, Manifest
    from raycache._cache.opened import ReadOnlyStore
    from raycache._cache.order import Place
    from raycache._cache.records import RowRange, ShardEntry, SkippedRow
    from raycache._compute.pool_config import PoolConfig
    from raycache._encoders.batching import Batching
    from raycache._encoders.config import EncoderConfig
    from raycache._export.run import ExportResult, export
    from raycache._fill.config import FillConfig, ViewsConfig
    from raycache._fill.run import FillResult, fill
    from raycache._heads.joint import Inputs
    from raycache._heads.loaded import Head, load_head
    from raycache._heads.specs import HeadSpec
    from raycache._pipeline import PipelineResult, pipeline, probe
    from raycache._predict.config import PredictConfig
    from raycache._predict.evaluate import evaluate
    from raycache._predict.evaluation import Evaluation
    from raycache._predict.run import PredictResult, predict_file
    from raycache._probe.config import KnnConfig, LogregConfig, ProbeConfig, ProbeHeadsConfig
    from raycache._probe.result import Outcome, ProbeResult
    from raycache._serve.config import ServeConfig
    from raycache._serve.run import serve, serve_app
    from raycache._serve.st_export import export_head
    from raycache._source.config import SourceConfig
    from raycache._source.demo_data import stdlib_docs
    from raycache._train.config import (
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
    )
    from raycache._train.driver.run import TrainResult, train
    from raycache._train.folder.record import RunInfo, list_runs
    from raycache._train.objectives.retrieval import retrieval_metrics
    from raycache._train.runspec import Recipe, RunSpec
    from raycache._train.tracking.hook import RunContext, TrainCallback
    from raycache._upkeep.compact import compact
    from raycache._upkeep.du import Usage, du
    from raycache._upkeep.gc import GcResult, Stray, gc
    from raycache._upkeep.removal import Removal
    from raycache._upkeep.repair import repair
    from raycache._upkeep.verify import Duplicates, Report, verify
