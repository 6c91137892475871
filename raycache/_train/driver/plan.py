"""A training run planned on the driver: from a checked config and its cache, the WorkerSpec
built once (class weights, sweep members, views, placement, the run's name and folder); no
Ray."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import numpy as np

from raycache._cache.committed import Cache
from raycache._cache.store import Store
from raycache._errors import ConfigError
from raycache._fit.part import keeps
from raycache._heads.linear_start import starts_linear
from raycache._heads.specs import HeadSpec, standardizes
from raycache._train.config import TrainConfig
from raycache._train.defaults import feature_l1, resolve_hidden, resolve_solver
from raycache._train.driver.checks import check
from raycache._train.driver.placement import cluster, resolve_placement, resolve_workers
from raycache._train.folder.record import read_record, runs_dir
from raycache._train.objectives import OBJECTIVES
from raycache._train.runspec import Member, Recipe, WorkerSpec, digest, sweep_record
from raycache._train.sweep.grid import apply, members

__all__ = ["class_weights", "cluster", "guard_run_folder", "prepare", "resolve_views",
           "run_name", "selection", "sweep_members"]


def class_weights(cfg: TrainConfig, counts: np.ndarray) -> tuple[float, ...] | None:
    if cfg.loss.class_weights == "balanced":
        return tuple(float(counts.sum() / (len(counts) * max(c, 1))) for c in counts)
    return tuple(float(w) for w in cfg.loss.class_weights) if cfg.loss.class_weights else None


def sweep_members(cfg: TrainConfig, head: HeadSpec, rows: int | None = None,
                  workers: int = 0, l1: float | None = None) -> tuple[Member, ...]:
    """The sweep's members, each with its own head and recipe (none without a sweep; auto
    settings resolved for each member's head, as in Recipe.from_config)."""
    out = []
    if cfg.sweep:  # a member's hidden: auto is HIDDEN (train_on resolved it already)
        cfg = resolve_hidden(cfg, bool(head.trainable))
    for settings in members(cfg):
        c = apply(cfg, settings)
        out.append(Member(
            settings=tuple((k, tuple(v) if isinstance(v, list) else v)
                           for k, v in settings.items()),
            head=dataclasses.replace(head, head=c.head, hidden=tuple(c.hidden),
                                     dropout=c.dropout,
                                     standardize=standardizes(c.head, bool(head.trainable)),
                                     linear_start=starts_linear(
                                         c.head, c.objective, head.num_classes, c.hidden,
                                         bool(head.trainable))),
            recipe=Recipe.from_config(c, rows, workers, l1)))
    return tuple(out)


def selection(cfg: TrainConfig, recipe: Recipe) -> tuple[str, str]:
    """(metric, mode) that picks a sweep's best member: `select`, else the monitor's."""
    if cfg.select is None:
        ev = recipe.evaluation
        return ev.monitor, (ev.mode if cfg.select_mode == "auto" else cfg.select_mode)
    if cfg.select_mode != "auto":
        return cfg.select, cfg.select_mode
    return cfg.select, "min" if cfg.select.endswith("loss") else "max"


def resolve_views(cfg: TrainConfig, cache: Cache, head: HeadSpec) -> tuple[int, tuple[str, ...]]:
    """(K, encoders) of the views the run trains on: auto uses them when the cache has views
    of the head's encoders and the objective reads the cache's rows itself; (0, ()) for none."""
    views = cache.manifest.extra.get("views")
    have = tuple(e for e in head.encoders if views and e in views["encoders"])
    if cfg.views is False:
        return 0, ()
    own = OBJECTIVES[cfg.objective].data_sources is not None
    if cfg.views is True and (not have or own):
        why = (f"objective {cfg.objective!r} reads its own rows (pairs), without views" if own
               else f"cache {cache.name}/{cache.fingerprint[:12]} has no views of "
                    f"{list(head.encoders)}")
        raise ConfigError([f"views=true: {why}; fill the cache with `views:` set, or set "
                           "views: auto or false"])
    return (int(views["count"]), have) if have and not own else (0, ())


def run_name(cfg: TrainConfig, head: HeadSpec, recipe: Recipe,
             sweep: dict[str, Any] | None = None, views: int = 0) -> str:
    """The user's run_name, or one derived from the config (the same config, the same run)."""
    if cfg.run_name:
        return cfg.run_name
    family = "sweep" if sweep else "".join(c if c.isalnum() or c in "-_" else "-"
                                           for c in head.head)
    name = f"{family}-{digest(head, recipe, sweep, views)[:12]}"
    return name if cfg.resume else f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def prepare(cfg: TrainConfig, checked: tuple | None = None, rows: int | None = None,
            overlap: str = "") -> tuple[Cache, WorkerSpec]:
    """Everything checked and resolved, and the WorkerSpec built (Ray is joined only where an auto
    choice needs the cluster; `checked` is check()'s result when the caller already ran it;
    `rows`, the cache's rows where its manifest does not list them yet; `overlap`: why they
    are not all there yet, as the source says)."""
    if checked is None:
        store = Store.from_config(cfg.store)
        store.check_reachable()
        checked = check(cfg, store)
    cache, head, counts = checked
    store = cache.store
    rows = cache.manifest.rows if rows is None else rows
    workers, why = resolve_workers(cfg, head, rows)
    l1 = feature_l1(cache, head.encoders) if not head.trainable else None
    recipe = Recipe.from_config(cfg, rows, workers, l1)
    select, select_mode = selection(cfg, recipe)
    sweep = sweep_members(cfg, head, rows, workers, l1)
    views, view_encoders = resolve_views(cfg, cache, head)
    held = rows * (1 + views)  # in memory, a row with views takes K + 1 rows of features
    placement = resolve_placement(cfg, head, held, workers)
    recipe = resolve_solver(cfg, recipe, head, rows, workers, placement, views, overlap)
    name = run_name(cfg, head, recipe, sweep_record(sweep, select, select_mode), views)
    spec = WorkerSpec.of(
        head=head, recipe=recipe, run_name=name, key=cache.manifest.key_column, rows=rows,
        placement=placement, num_workers=workers,
        use_gpu=cfg.resources.use_gpu, class_weights=class_weights(cfg, counts), store=store,
        shards=tuple((p, s.rows) for p, s in zip(cache.shard_paths(), cache.manifest.shards,
                                                  strict=True)),
        checks=tuple((s.bytes, s.sha256) for s in cache.manifest.shards) if cfg.verify else (),
        keeps=keeps(cache.manifest.shards),
        run_dir=f"{runs_dir(cache)}/{name}", checkpoint_every=cfg.checkpoints.every,
        checkpoint_seconds=cfg.checkpoints.seconds, prefetch_batches=cfg.resources.prefetch_batches,
        progress=cfg.progress, sweep=sweep, select=select, select_mode=select_mode,
        views=views, view_encoders=view_encoders, why=why, tracking=tuple(cfg.tracking),
    )
    guard_run_folder(cfg, spec, read_record(spec.store, spec.run_dir))
    return cache, spec


def guard_run_folder(cfg: TrainConfig, spec: WorkerSpec, record: dict[str, Any] | None
                     ) -> None:
    """Never train over another run: the folder must be empty (`record`, its run.json: None), or
    hold this config's run."""
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
