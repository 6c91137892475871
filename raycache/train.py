"""TRAIN: the Ray Train driver that fits a head on a committed cache with DDP workers."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from raycache.cache import Cache, open_cache
from raycache.config import TrainConfig, load
from raycache.errors import ConfigError, RaycacheError
from raycache.split import SplitByKey
from raycache.store import RUNS, Store

if TYPE_CHECKING:
    import pandas as pd

    from raycache.predict import Head


@dataclass
class TrainResult:
    cache: Cache
    history: list[dict[str, float]]
    """One dict of metrics per epoch."""
    checkpoint: str
    """URI of the final checkpoint folder (head.pt and head.json)."""
    seconds: float
    spec: dict[str, Any]

    @property
    def metrics(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def load_head(self) -> Head:
        """The trained head, ready to predict from raw inputs or embeddings."""
        from raycache.predict import load_head

        return load_head(self.checkpoint, self.cache.store)

    def history_frame(self) -> pd.DataFrame:
        """Metrics per epoch as a DataFrame (plot it with .plot(x="epoch"))."""
        import pandas as pd

        return pd.DataFrame(self.history)

    def summary(self) -> str:
        m = self.metrics
        return (
            f"train {self.spec['head']} on {self.cache.name}/{self.cache.fingerprint[:12]}: "
            f"{len(self.history)} epochs, {self.spec['num_workers']} workers, "
            f"val_acc {m.get('val_acc', 0):.3f}, val_loss {m.get('val_loss', 0):.4f}, "
            f"{self.seconds:.1f} s, checkpoint {self.checkpoint}"
        )

    def __repr__(self) -> str:
        return f"TrainResult({self.summary()})"


def prepare(cfg: TrainConfig) -> tuple[Cache, dict[str, Any]]:
    """Check the config against the cache and derive the head's shape; no Ray yet."""
    store = Store(cfg.store.uri, cfg.store.options, cfg.store.shared)
    store.check_reachable()
    cache = open_cache(cfg.cache, store, cfg.fingerprint)
    m = cache.manifest
    problems = []
    encoders = cfg.encoders or [e.name for e in m.encoders]
    have = [e.name for e in m.encoders]
    problems += [
        f"encoders: {e!r} is not in cache {m.name}/{m.fingerprint}; it holds {have}"
        for e in encoders
        if e not in have
    ]
    label = cfg.label or (m.label_columns[0] if m.label_columns else None)
    if label is None:
        problems.append(f"cache {m.name} has no label column; fill it with source.labels set")
    elif label not in m.label_columns:
        problems.append(f"label={label!r} is not cached; the cache holds {m.label_columns}")
    elif not m.label_types[label].startswith(("int", "uint")):
        problems.append(
            f"label column {label!r} holds {m.label_types[label]} values; a classifier needs "
            "integer class ids 0..K-1. Map the labels to integers in the source and fill again, "
            "or name an integer label column with `label:`"
        )
    if problems:
        raise ConfigError(problems)
    labels = cache.read_table(columns=[label]).column(label)
    if labels.null_count:
        raise ConfigError([f"label column {label!r} has {labels.null_count} empty values"])
    low, high = pc.min(labels).as_py(), pc.max(labels).as_py()
    if low is None or low < 0:
        raise ConfigError([f"label column {label!r}: smallest class id is {low}; expected >= 0"])
    spec = {
        "head": cfg.head,
        "hidden": cfg.hidden,
        "dropout": cfg.dropout,
        "in_dim": sum(m.encoder(e).dim for e in encoders),
        "num_classes": int(high) + 1,
        "encoders": encoders,
        "label": label,
        "key": m.key_column,
        "epochs": cfg.epochs,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "val_fraction": cfg.val_fraction,
        "seed": cfg.seed,
        "num_workers": cfg.num_workers,
        "placement": cfg.placement,
        "checkpoint_every": cfg.checkpoint_every,
        "progress": cfg.progress,
        "rows": m.rows,
        "cache": m.name,
        "fingerprint": m.fingerprint,
        "store": {"uri": store.uri, "options": store.options},
    }
    return cache, spec


def choose_placement(cfg: TrainConfig, spec: dict[str, Any]) -> str:
    """auto: in memory (gpu with use_gpu, else cpu) when each worker's share takes under a
    quarter of the smallest node's memory per worker; otherwise stream from the store."""
    if cfg.placement != "auto":
        return cfg.placement
    import ray

    share = spec["rows"] * (spec["in_dim"] * 4 + 8) / cfg.num_workers
    memory = min(n["Resources"].get("memory", 0) for n in ray.nodes() if n.get("Alive"))
    if share < memory / 4 / cfg.num_workers:
        return "gpu" if cfg.use_gpu else "cpu"
    return "stream"


def train(config: TrainConfig | dict | str, *, progress: bool | None = None) -> TrainResult:
    """Train a head on a committed cache (config: a TrainConfig, a dict or a YAML path)."""
    cfg = load(TrainConfig, config)
    if progress is not None:
        cfg.progress = progress
    cache, spec = prepare(cfg)

    from ray.train import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from raycache.cluster import check_store_for_cluster, connect
    from raycache.loop import train_loop

    connect(cfg.progress)
    check_store_for_cluster(cache.store)
    start = time.perf_counter()
    spec["placement"] = choose_placement(cfg, spec)
    datasets = {}
    if spec["placement"] == "stream":
        ds = cache.to_ray_dataset(columns=[spec["key"], spec["label"], *spec["encoders"]])
        split = dict(key=spec["key"], fraction=cfg.val_fraction)
        datasets = {
            "train": ds.map_batches(SplitByKey(**split, validation=False), batch_format="pyarrow"),
            "val": ds.map_batches(SplitByKey(**split, validation=True), batch_format="pyarrow"),
        }
    else:
        spec["shards"] = [[p, s.rows] for p, s in zip(cache.shard_paths(), cache.manifest.shards,
                                                        strict=True)]
    resources = {"CPU": cfg.cpus_per_worker, **({"GPU": 1} if cfg.use_gpu else {})}
    run_name = cfg.run_name or f"{cfg.head}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
    store = cache.store
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=spec,
        scaling_config=ScalingConfig(
            num_workers=cfg.num_workers, use_gpu=cfg.use_gpu, resources_per_worker=resources
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=store.path(cache.name, cache.fingerprint, RUNS),
            storage_filesystem=None if store.is_local else store.pyarrow_fs(),
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
        datasets=datasets or None,
    )
    result = trainer.fit()
    if result.error is not None:
        raise RaycacheError(f"training failed: {result.error}") from result.error
    if result.checkpoint is None:
        raise RaycacheError("training finished without a checkpoint; see the worker logs")
    return TrainResult(
        cache=cache,
        history=list(result.return_value or []),
        checkpoint=store.url(result.checkpoint.path),
        seconds=time.perf_counter() - start,
        spec=spec,
    )
