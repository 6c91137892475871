"""TRAIN: the Ray Train driver: check the config against the cache, build the RunSpec once, run
the loop in-process (local mode) or on DDP workers, resume, and record the run."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from raycache import checkpoint as ckpt
from raycache.cache import Cache, open_cache
from raycache.config import TrainConfig, load
from raycache.errors import ConfigError, RaycacheError
from raycache.heads import HEAD_CONFIG, HeadSpec
from raycache.metrics_log import read_sweep
from raycache.objectives import REGISTRY as OBJECTIVES
from raycache.runs import read_record, runs_dir, write_record
from raycache.runspec import Member, Recipe, RunSpec, digest, sweep_record
from raycache.store import Store
from raycache.sweep import apply, members

if TYPE_CHECKING:
    import pandas as pd

    from raycache.predict import Head

__all__ = ["AUTO_LOCAL_BYTES", "TrainResult", "prepare", "train"]

AUTO_LOCAL_BYTES = 512 * 2**20
"""num_workers: auto trains in-process (Ray Train local mode) below this many feature bytes."""


@dataclass
class TrainResult:
    cache: Cache
    spec: RunSpec
    history: list[dict[str, Any]]
    """One dict of metrics per epoch."""
    checkpoint: str
    """URI of the final checkpoint folder (head.pt, head.json, state.pt)."""
    seconds: float
    resumed_from: list[int] = field(default_factory=list)
    """Epochs this run resumed from (empty for a run that never stopped)."""
    sweep: list[dict[str, Any]] = field(default_factory=list)
    """A sweep's members, one dict each: member, settings, the select metric's value, epoch
    (whose weights count), selected, stopped, epochs, metrics (last epoch's) and history."""

    @property
    def metrics(self) -> dict[str, Any]:
        return self.history[-1] if self.history else {}

    @property
    def run_dir(self) -> str:
        return self.cache.store.url(self.spec.run_dir)

    def load_head(self) -> Head:
        """The trained head, ready to predict from raw inputs or embeddings."""
        from raycache.predict import load_head

        return load_head(self.checkpoint, **self.cache.store.options)

    def history_frame(self) -> pd.DataFrame:
        """Metrics per epoch as a DataFrame (plot it with .plot(x="epoch"))."""
        import pandas as pd

        return pd.DataFrame(self.history)

    @property
    def best(self) -> dict[str, Any]:
        """A sweep's selected member (empty for a single head)."""
        return next((row for row in self.sweep if row["selected"]), {})

    def sweep_frame(self) -> pd.DataFrame:
        """A sweep's members as a DataFrame: one row each, its settings as columns."""
        import pandas as pd

        return pd.DataFrame([{**row["settings"], **{k: v for k, v in row.items()
                                                     if k not in ("settings", "history")}}
                             for row in self.sweep])

    def summary(self) -> str:
        m, s = self.metrics, self.spec
        workers = f"{s.num_workers} workers" if s.num_workers else "1 worker (in-process)"
        resumed = f", resumed from epoch {self.resumed_from}" if self.resumed_from else ""
        what = s.head.head
        if self.sweep:
            best = self.best
            what = (f"sweep of {len(self.sweep)} heads, best: {best['settings']} "
                    f"({s.select} {best[s.select]:.4g}),")
        return (
            f"train {what} on {self.cache.name}/{self.cache.fingerprint[:12]}: "
            f"{len(self.history)} epochs, {workers}, "
            f"val_acc {m.get('val_acc', 0):.3f}, val_loss {m.get('val_loss', 0):.4f}, "
            f"{self.seconds:.1f} s, run {s.run_name}{resumed}, checkpoint {self.checkpoint}"
        )

    def __repr__(self) -> str:
        return f"TrainResult({self.summary()})"


def check(cfg: TrainConfig, store: Store) -> tuple[Cache, HeadSpec, np.ndarray]:
    """Check the config against the cache; the head's spec and the training class counts."""
    cache = open_cache(cfg.cache, store, cfg.fingerprint)
    m = cache.manifest
    problems = []
    have = [e.name for e in m.encoders]
    encoders = cfg.encoders or have
    problems += [f"encoders: {e!r} is not in cache {m.name}/{m.fingerprint}; it holds {have}"
                 for e in encoders if e not in have]
    label = cfg.label or (m.label_columns[0] if m.label_columns else None)
    family = OBJECTIVES[cfg.objective]
    if label is None:
        problems.append(f"cache {m.name} has no label column; fill it with source.labels set")
    elif label not in m.label_columns:
        problems.append(f"label={label!r} is not cached; the cache holds {m.label_columns}")
    elif not m.label_types[label].startswith(("int", "uint")):
        ids = "group" if family.labels == "groups" else "class"
        problems.append(
            f"label column {label!r} holds {m.label_types[label]} values; objective "
            f"{cfg.objective!r} needs integer {ids} ids 0..K-1. Map the labels to integers in "
            "the source and fill again, or name an integer label column with `label:`")
    if problems:
        raise ConfigError(problems)
    labels = cache.read_table(columns=[label]).column(label)
    if labels.null_count:
        raise ConfigError([f"label column {label!r} has {labels.null_count} empty values"])
    low, high = pc.min(labels).as_py(), pc.max(labels).as_py()
    if low is None or low < 0:
        raise ConfigError([f"label column {label!r}: smallest class id is {low}; expected >= 0"])
    counts = np.bincount(labels.to_numpy(), minlength=int(high) + 1)
    if isinstance(cfg.class_weights, list) and len(cfg.class_weights) != len(counts):
        raise ConfigError([f"class_weights has {len(cfg.class_weights)} values; the label "
                           f"{label!r} has {len(counts)} classes (0..{high}): give one each"])
    saved = m.extra.get("encoder_configs", {})
    head = HeadSpec(
        head=cfg.head, in_dim=sum(m.encoder(e).dim for e in encoders),
        num_classes=int(high) + 1, hidden=tuple(cfg.hidden), dropout=cfg.dropout,
        objective=cfg.objective, out_dim=family.out_dim(cfg, int(high) + 1),
        normalize=cfg.normalize,
        encoders=tuple(encoders), label=label, cache=m.name, fingerprint=m.fingerprint,
        encoder_configs={e: saved[e] for e in encoders if e in saved},
        weights_digests={e: m.encoder(e).weights_digest for e in encoders},
    )
    return cache, head, counts


def class_weights(cfg: TrainConfig, counts: np.ndarray) -> tuple[float, ...] | None:
    if cfg.class_weights == "balanced":
        return tuple(float(counts.sum() / (len(counts) * max(c, 1))) for c in counts)
    return tuple(float(w) for w in cfg.class_weights) if cfg.class_weights else None


def resolve_workers(cfg: TrainConfig, head: HeadSpec, rows: int) -> int:
    """auto: in-process for a cache under AUTO_LOCAL_BYTES of features; else DDP on every GPU
    (use_gpu) or on 2 CPU workers."""
    if cfg.num_workers != "auto":
        return int(cfg.num_workers)
    if rows * (head.in_dim * 4 + 8) < AUTO_LOCAL_BYTES:
        return 0
    if cfg.use_gpu:
        return max(int(_cluster(cfg).cluster_resources().get("GPU", 1)), 1)
    return 2


def resolve_placement(cfg: TrainConfig, head: HeadSpec, rows: int, workers: int) -> str:
    """auto: in memory (gpu with use_gpu, else cpu) when each worker's share takes under a
    quarter of its memory (the smallest node's, split between the workers); else stream."""
    if cfg.placement != "auto":
        return cfg.placement
    if workers == 0:  # local mode: this process's machine
        import psutil

        world, memory = 1, psutil.virtual_memory().total
    else:
        world = workers
        memory = min(n["Resources"].get("memory", 0)
                     for n in _cluster(cfg).nodes() if n.get("Alive"))
    if rows * (head.in_dim * 4 + 8) / world < memory / 4 / world:
        return "gpu" if cfg.use_gpu else "cpu"
    return "stream"


def _cluster(cfg: TrainConfig) -> Any:
    """Ray, connected: only the DDP path and its auto choices need a cluster."""
    import ray

    from raycache.cluster import connect

    connect(cfg.progress)
    return ray


def sweep_members(cfg: TrainConfig, head: HeadSpec) -> tuple[Member, ...]:
    """The sweep's members, each with its own head and recipe (none without a sweep)."""
    out = []
    for settings in members(cfg):
        c = apply(cfg, settings)
        out.append(Member(
            settings=tuple((k, tuple(v) if isinstance(v, list) else v)
                           for k, v in settings.items()),
            head=dataclasses.replace(head, head=c.head, hidden=tuple(c.hidden),
                                     dropout=c.dropout),
            recipe=Recipe.from_config(c)))
    return tuple(out)


def selection(cfg: TrainConfig, recipe: Recipe) -> tuple[str, str]:
    """(metric, mode) that picks a sweep's best member: `select`, else the monitor's."""
    if cfg.select is None:
        return recipe.monitor, (recipe.mode if cfg.select_mode == "auto" else cfg.select_mode)
    if cfg.select_mode != "auto":
        return cfg.select, cfg.select_mode
    return cfg.select, "min" if cfg.select.endswith("loss") else "max"


def run_name(cfg: TrainConfig, head: HeadSpec, recipe: Recipe,
             sweep: dict[str, Any] | None = None) -> str:
    """The user's run_name, or one derived from the config (the same config, the same run)."""
    if cfg.run_name:
        return cfg.run_name
    family = "sweep" if sweep else "".join(c if c.isalnum() or c in "-_" else "-"
                                           for c in head.head)
    name = f"{family}-{digest(head, recipe, sweep)[:12]}"
    return name if cfg.resume else f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def prepare(cfg: TrainConfig, checked: tuple | None = None) -> tuple[Cache, RunSpec]:
    """Everything checked and resolved, and the RunSpec built (Ray is joined only where an auto
    choice needs the cluster; `checked` is check()'s result when the caller already ran it)."""
    if checked is None:
        store = Store.from_config(cfg.store)
        store.check_reachable()
        checked = check(cfg, store)
    cache, head, counts = checked
    store = cache.store
    recipe = Recipe.from_config(cfg)
    rows = cache.manifest.rows
    workers = resolve_workers(cfg, head, rows)
    select, select_mode = selection(cfg, recipe)
    sweep = sweep_members(cfg, head)
    name = run_name(cfg, head, recipe, sweep_record(sweep, select, select_mode))
    spec = RunSpec(
        head=head, recipe=recipe, run_name=name, key=cache.manifest.key_column, rows=rows,
        placement=resolve_placement(cfg, head, rows, workers), num_workers=workers,
        use_gpu=cfg.use_gpu, class_weights=class_weights(cfg, counts), store=store,
        shards=tuple((p, s.rows) for p, s in zip(cache.shard_paths(), cache.manifest.shards,
                                                  strict=True)),
        run_dir=f"{runs_dir(cache)}/{name}", checkpoint_every=cfg.checkpoint_every,
        checkpoint_seconds=cfg.checkpoint_seconds, prefetch_batches=cfg.prefetch_batches,
        progress=cfg.progress, sweep=sweep, select=select, select_mode=select_mode,
    )
    guard_run_folder(cfg, spec)
    return cache, spec


def guard_run_folder(cfg: TrainConfig, spec: RunSpec) -> None:
    """Never train over another run: the folder must be empty, or hold this config's run."""
    record = read_record(spec.store, spec.run_dir)
    if record is None:
        return
    if record.get("digest") != spec.digest():
        raise ConfigError([
            f"run_name={spec.run_name!r} already holds a run of a different config (digest "
            f"{record.get('digest', '?')[:12]}, this one {spec.digest()[:12]}); choose another "
            "run_name, or leave it out to derive one from the config"])
    if not cfg.resume:
        raise ConfigError([f"run_name={spec.run_name!r} already holds a run and resume is "
                           "false; choose another run_name, or set resume: true to continue"])


def trainer(cache: Cache, spec: RunSpec, max_failures: int, cpus_per_worker: float) -> Any:
    from ray.train import (
        CheckpointConfig,
        FailureConfig,
        LoggingConfig,
        RunConfig,
        ScalingConfig,
    )
    from ray.train.torch import TorchTrainer

    if spec.num_workers:
        resources = {"CPU": cpus_per_worker, **({"GPU": 1} if spec.use_gpu else {})}
        scaling = ScalingConfig(num_workers=spec.num_workers, use_gpu=spec.use_gpu,
                                resources_per_worker=resources)
    else:
        scaling = ScalingConfig(num_workers=0)
    store = cache.store
    return TorchTrainer(
        _train_loop,
        train_loop_config={"spec": spec},
        scaling_config=scaling,
        run_config=RunConfig(
            name=spec.run_name,
            storage_path=runs_dir(cache),
            storage_filesystem=None if store.is_local else store.pyarrow_fs(),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=max_failures),
            logging_config=LoggingConfig(log_level="WARNING"),  # no per-report INFO dumps
        ),
    )


def _train_loop(config: dict[str, Any]) -> dict[str, Any]:
    from raycache.loop import train_loop

    return train_loop(config)


def train(config: TrainConfig | dict | str, *, progress: bool | None = None) -> TrainResult:
    """Train a head on a committed cache (config: a TrainConfig, a dict or a YAML path).
    Running the same config again resumes its run (or returns it, when it has finished)."""
    cfg = load(TrainConfig, config)
    if progress is not None:
        cfg.progress = progress
    start = time.perf_counter()
    store = Store.from_config(cfg.store)
    store.check_reachable()
    checked = check(cfg, store)  # bad input fails here, before Ray starts

    from raycache.loop import quiet_ray_train

    quiet_ray_train()
    cache, spec = prepare(cfg, checked)
    if spec.num_workers:  # local mode runs in this process: no Ray cluster to start or join
        from raycache.cluster import check_store_for_cluster

        _cluster(cfg)
        check_store_for_cluster(cache.store)
    store = spec.store
    record = read_record(store, spec.run_dir)
    if record and record["status"] == "finished" and ckpt.latest(store, spec.run_dir):
        return _result(cache, spec, start, {"resumed_from": []})
    base = {**spec.record(), "started": (record or {}).get("started")}
    base = {k: v for k, v in base.items() if v is not None}
    write_record(store, spec.run_dir, base, "running")
    try:
        result = trainer(cache, spec, cfg.max_failures, cfg.cpus_per_worker).fit()
        if result.error is not None:
            raise result.error
    except Exception as exc:
        write_record(store, spec.run_dir, base, "failed", error=f"{type(exc).__name__}: {exc}")
        if isinstance(exc, RaycacheError):
            raise
        raise RaycacheError(f"training run {spec.run_name!r} failed: {exc}; it resumes from "
                            "its last checkpoint when run again with the same config") from exc
    out = _result(cache, spec, start, result.return_value or {})
    best = {spec.recipe.monitor: _best(out, spec)}
    if out.sweep:
        best = {spec.select: out.best[spec.select], "member": out.best["member"],
                "settings": out.best["settings"]}
    write_record(store, spec.run_dir, base, "finished", best=best,
                 metrics={k: v for k, v in out.metrics.items() if k != "placement"})
    return out


def _best(out: TrainResult, spec: RunSpec) -> float | None:
    values = [m[spec.recipe.monitor] for m in out.history if spec.recipe.monitor in m]
    if not values:
        return None
    return max(values) if spec.recipe.mode == "max" else min(values)


def _result(cache: Cache, spec: RunSpec, start: float, value: dict[str, Any]) -> TrainResult:
    path = ckpt.latest(spec.store, spec.run_dir)
    if path is None:
        raise RaycacheError(f"run {spec.run_name!r} finished without a checkpoint in "
                            f"{spec.store.url(spec.run_dir)}; see the worker logs")
    history = value.get("history")
    if history is None:
        history = spec.store.read_json(f"{path}/{HEAD_CONFIG}")["history"]
    sweep = value.get("sweep")
    if sweep is None and spec.sweep:
        sweep = read_sweep(spec.store, spec.run_dir)
    return TrainResult(cache=cache, spec=spec, history=list(history),
                       checkpoint=spec.store.url(path), seconds=time.perf_counter() - start,
                       resumed_from=list(value.get("resumed_from", [])), sweep=list(sweep or []))
