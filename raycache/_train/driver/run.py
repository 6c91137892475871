"""TRAIN: the driver: check the config against the cache, build the WorkerSpec once, run the loop
in this process (no Ray Train: nothing of it is needed there) or on Ray Train's DDP workers,
resume, and record the run."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache
from raycache._cache.store import Store
from raycache._core.caller import warn
from raycache._core.extras import require
from raycache._core.transient import is_transient
from raycache._core.trust import vouch
from raycache._errors import (
    ConfigError,
    DivergedError,
    RaycacheError,
    StoreError,
    StoreUnavailable,
)
from raycache._heads.specs import HEAD_CONFIG
from raycache._train.config import TrainConfig
from raycache._train.console import quiet_ray_train
from raycache._train.data.committed import Committed
from raycache._train.defaults import resolve_hidden
from raycache._train.driver.checks import check, trained_encoders
from raycache._train.driver.checks import load_config as load_train
from raycache._train.driver.lease import run_lease
from raycache._train.driver.plan import cluster, guard_run_folder, prepare
from raycache._train.driver.resources import check_local
from raycache._train.driver.result import TrainResult
from raycache._train.folder.record import runs_dir
from raycache._train.folder.run_folder import RunFolder
from raycache._train.runspec import WorkerSpec

if TYPE_CHECKING:

    from raycache._train.data.overlap import OverlapFill

    Source = Committed | OverlapFill

__all__ = ["TrainResult", "train", "train_on"]


def trainer(cache: Cache, spec: WorkerSpec, max_failures: int, cpus_per_worker: float) -> Any:
    from ray.train import (
        CheckpointConfig,
        FailureConfig,
        LoggingConfig,
        RunConfig,
        ScalingConfig,
    )

    from raycache._train.driver.failures import Trainer

    quiet_ray_train()  # the driver's Ray Train logs
    resources = {"CPU": cpus_per_worker, **({"GPU": 1} if spec.use_gpu else {})}
    scaling = ScalingConfig(num_workers=spec.num_workers, use_gpu=spec.use_gpu,
                            resources_per_worker=resources)
    # Ray records the loop config and run config (its train state API, export events, the
    # controller's arguments): DDP workers get the credentials through Ray's object store.
    store = spec.store.for_workers()
    # Ray Train's preemption watcher serves ray.train.get_preemption_info, which the loop never
    # calls; its actor would print Ray Core's constructor-arguments line in every run
    # (ray-project/ray#53727). The driver's setting travels to the controller.
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    return Trainer(
        _train_loop,
        train_loop_config={"spec": dataclasses.replace(spec, store=store)},
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
    import torch

    from raycache._train.worker.loop import train_loop

    if config["spec"].num_workers:  # on a Ray Train worker
        _quiet_reports()
    threads = torch.get_num_threads()  # a streamed part lowers them; in-process, restore them
    try:
        return train_loop(config)
    finally:
        torch.set_num_threads(threads)


def _quiet_reports() -> None:
    """No "Reporting training result N: TrainingReport(...)" dump per report: Ray Train 2.60
    logs it at INFO under a logger named by its module's file path, outside "ray.train", so
    neither LoggingConfig nor the "ray.train" logger's level keeps it out."""
    import logging

    from ray.train.v2._internal.execution import context

    logging.getLogger(context.__file__).setLevel(logging.WARNING)


def train(config: TrainConfig | dict | str, *, progress: bool | None = None,
          filling: object = None, landing: object = None) -> TrainResult:
    """Train a head on a committed cache; the same config again resumes its run (or returns it).

    Args:
        config: A TrainConfig, a dict of its fields, or a YAML file's path.
        progress: Print a line per epoch (None: as `config.progress` says).
        filling: Deprecated (a DeprecationWarning): train while a fill runs through
            `raycache.pipeline` with `overlap: true`.
        landing: The older name of `filling` (a DeprecationWarning).

    Returns:
        The run's history, checkpoint, best epoch and sweep.

    Raises:
        ConfigError: Every problem of the config, or of it against the cache and cluster.
        CacheNotFound: No committed cache of that name (or fingerprint) is in the store.
        CorruptShard: A shard does not match its manifest (`raycache repair` it).
        StoreError: The store cannot be reached or written (StoreUnavailable: run it again).
        FillFailed: The fill under way (the deprecated `filling`) stopped with an error.
        RaycacheError: Another train holds the run (its lease: same run_name, now), or
            training failed otherwise (DivergedError: a loss became NaN or inf).

    Example:
        ```python
        run = raycache.train({"cache": "docs", "head": "mlp", "loop": {"epochs": 20}})
        ```
    """
    if landing is not None and filling is not None:
        raise TypeError("raycache.train: pass neither filling= nor landing= (its old name); "
                        "train while a fill runs with raycache.pipeline and overlap: true")
    overlap = filling if landing is None else landing
    if overlap is not None:
        warn(f"raycache.train({'filling' if landing is None else 'landing'}=...) is "
             "deprecated: train while a fill runs with raycache.pipeline and overlap: true",
             DeprecationWarning)
    cfg = load_train(config)
    if progress is not None:
        cfg.progress = progress
    return train_on(cfg, overlap=overlap)  # type: ignore[arg-type]


def train_on(cfg: TrainConfig, cache: Cache | None = None, overlap: OverlapFill | None = None
             ) -> TrainResult:
    """`train` of a loaded config, on `cache` where the caller opened it already (the probe
    hands on its caches), or on a fill under way (`overlap`: pipeline's)."""
    require("ray", "raycache.train (the ray extra: Ray Train and the similarity losses)")
    vouch([cfg.head, *cfg.sweep.get("head", [])])  # the user's own head families
    start = time.perf_counter()
    store = Store.from_config(cfg.store)
    store.check_reachable()
    source: Source = overlap or Committed(cfg, store, cache)
    cfg = resolve_hidden(cfg, bool(trained_encoders(cfg, source.cache())))
    checked = check(cfg, store, source.cache(), source.column)  # bad input fails before Ray
    cache, spec = prepare(cfg, checked, source.rows(checked[0].manifest.key_column),
                          overlap=source.overlap)
    if spec.num_workers:  # local mode runs in this process: no Ray cluster to start or join
        from raycache._compute.cluster import check_store_for_cluster

        cluster(cfg)
        check_store_for_cluster(cache.store)
        _check_cluster(cfg, spec.num_workers)
    else:
        check_local(cfg.resources)
    spec = source.runspec(spec)
    with run_lease(spec.store, spec.run_dir, spec.run_name):  # one train of a run at a time
        folder = RunFolder.open(spec.store, spec.run_dir)  # its record and checkpoints, once
        guard_run_folder(cfg, spec, folder.record)  # again, held: another run may have written
        return _held(cfg, cache, spec, folder, start, source)


def _held(cfg: TrainConfig, cache: Cache, spec: WorkerSpec, folder: RunFolder, start: float,
          source: Source) -> TrainResult:
    """The run, its lease held: returned where it finished before, else trained (resumed from
    its newest checkpoint) and recorded."""
    record = folder.record
    if folder.finished:
        return _result(cache, spec, folder, start, {"resumed_from": []},
                       finished_before=(record or {}).get("updated") or "?")
    first_epoch = folder.epochs_done
    base = {**spec.record(), "started": (record or {}).get("started")}
    base = {k: v for k, v in base.items() if v is not None}
    folder.write(base, "running")
    try:
        if not spec.num_workers:  # as Ray Train's local mode did, without importing it (~1 s)
            value = _train_loop({"spec": spec}) or {}
        else:
            result = trainer(cache, spec, cfg.checkpoints.max_failures,
                             cfg.resources.cpus_per_worker).fit()
            if result.error is not None:
                raise result.error
            value = result.return_value or {}
    except Exception as exc:
        error = _failed(exc, spec, folder, base)
        if error is exc:
            raise
        raise error from exc
    cache = source.committed()  # a fill's: the first epoch's validation waited for it
    folder.relist()  # the checkpoints training wrote
    out = _result(cache, spec, folder, start, value, first_epoch=first_epoch)
    best = dict(out.monitored)
    if out.sweep:
        best = {spec.select: out.best[spec.select], "member": out.best["member"],
                "settings": out.best["settings"], "epoch": out.best["epoch"]}
    diverged = {"diverged": out.diverged} if out.diverged else {}
    folder.write(base, "finished", best=best, checkpoint=out.checkpoint,
                 metrics={k: v for k, v in out.metrics.items() if k != "placement"}, **diverged)
    return out


def _check_cluster(cfg: TrainConfig, workers: int) -> None:
    """The workers against the cluster's nodes (asked of an autoscaling one), before Ray Train
    starts: a ConfigError rather than a wait without end."""
    from raycache._compute.pool import nodes
    from raycache._train.driver import resources

    found = resources.problems(cfg.resources, workers, nodes())
    if found:
        raise ConfigError(found)
    if cfg.resources.autoscaling:
        from ray.autoscaler.sdk import request_resources

        request_resources(**resources.request(cfg.resources, workers))


def _failed(exc: Exception, spec: WorkerSpec, folder: RunFolder, base: dict[str, Any]
            ) -> RaycacheError:
    """The error a failed run raises (a worker's raycache error as its own type), with the run
    recorded as failed; what running it again does, said only where it is true."""
    typed = next((e for e in getattr(exc, "worker_failures", {}).values()
                  if isinstance(e, RaycacheError)), None)  # e.g. a worker's CorruptShard
    error = typed or (exc if isinstance(exc, RaycacheError) else None)
    store, again = spec.store, ""
    try:
        folder.write(base, "failed", error=f"{type(exc).__name__}: {exc}",
                     **({"resumable": False} if isinstance(error, DivergedError) else {}))
        path = folder.relist()
        again = (f"it resumes from its checkpoint {path.rsplit('/', 1)[-1]} when run again "
                 "with the same config" if path else
                 "it saved no checkpoint, so running it again starts over")
    except Exception as store_exc:  # the store itself failed: say so, not "it resumes"
        again = (f"the store {store.uri!r} failed too ({type(store_exc).__name__}: "
                 f"{store_exc}); check that it is reachable and writable, then run again")
    if error is None and is_transient(exc):  # the store's service, past its client's retries
        return StoreUnavailable(f"training run {spec.run_name!r}: the store {store.uri!r} kept "
                                f"failing after its retries ({type(exc).__name__}: {exc}); "
                                f"{again}")
    if type(error) in (StoreError, StoreUnavailable):  # what running again does
        return type(error)(f"{error}; training run {spec.run_name!r}: {again}")
    if error is not None:
        return error
    return RaycacheError(f"training run {spec.run_name!r} failed: {type(exc).__name__}: {exc}; "
                         f"{again}")


def _best(out: TrainResult, spec: WorkerSpec) -> float | None:
    monitor = spec.recipe.evaluation.monitor
    values = [m[monitor] for m in out.history if monitor in m]
    if not values:
        return None
    return max(values) if spec.recipe.evaluation.mode == "max" else min(values)


def _result(cache: Cache, spec: WorkerSpec, folder: RunFolder, start: float,
            value: dict[str, Any], **more: Any) -> TrainResult:
    path = folder.latest
    if path is None:
        raise RaycacheError(f"run {spec.run_name!r} finished without a checkpoint in "
                            f"{spec.store.url(spec.run_dir)}; see the worker logs")
    saved = spec.store.read_json(f"{path}/{HEAD_CONFIG}")
    history = value.get("history")
    if history is None:
        history = saved["history"]
    sweep = value.get("sweep")
    if sweep is None and spec.sweep:
        sweep = folder.sweep()
    return TrainResult(cache=cache, spec=spec.view(), history=list(history),
                       checkpoint=spec.store.url(path), seconds=time.perf_counter() - start,
                       resumed_from=list(value.get("resumed_from", [])), sweep=list(sweep or []),
                       monitored=dict(saved.get("best") or {}),
                       weights=saved.get("weights", "last"),
                       weights_epoch=int(saved.get("weights_epoch") or (
                           (saved.get("best") or {}).get("epoch") if saved.get("weights")
                           == "best" else 0) or len(history)), **more)


