"""TRAIN: the Ray Train driver: check the config against the cache, build the RunSpec once, run
the loop in-process (local mode) or on DDP workers, resume, and record the run."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycache.cache.committed import Cache
from raycache.cache.store import Store
from raycache.errors import ConfigError, DivergedError, RaycacheError, StoreError
from raycache.heads.specs import HEAD_CONFIG
from raycache.train import checkpoint as ckpt
from raycache.train.config import TrainConfig
from raycache.train.metrics_log import read_sweep
from raycache.train.plan import check, cluster, prepare
from raycache.train.plan import load_config as load_train
from raycache.train.resources import check_local
from raycache.train.runs import read_record, runs_dir, write_record
from raycache.train.runspec import RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from raycache.heads.loaded import Head
    from raycache.train.data.landing import Landing

__all__ = ["TrainResult", "train"]


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
        from raycache.heads.loaded import load_head

        return load_head(self.checkpoint, **self.cache.store.fsspec_options())

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


def trainer(cache: Cache, spec: RunSpec, max_failures: int, cpus_per_worker: float) -> Any:
    from ray.train import (
        CheckpointConfig,
        FailureConfig,
        LoggingConfig,
        RunConfig,
        ScalingConfig,
    )

    from raycache.train.failures import Trainer

    if spec.num_workers:
        resources = {"CPU": cpus_per_worker, **({"GPU": 1} if spec.use_gpu else {})}
        scaling = ScalingConfig(num_workers=spec.num_workers, use_gpu=spec.use_gpu,
                                resources_per_worker=resources)
    else:
        scaling = ScalingConfig(num_workers=0)
    # Ray records the loop config and run config (its train state API, export events, the
    # controller's arguments): DDP workers get the credentials through Ray's object store.
    store = spec.store.for_workers() if spec.num_workers else spec.store
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
    from raycache.train.loop import train_loop

    return train_loop(config)


def train(config: TrainConfig | dict | str, *, progress: bool | None = None,
          landing: Landing | None = None) -> TrainResult:
    """Train a head on a committed cache (config: a TrainConfig, a dict or a YAML path), or on
    a fill under way (`landing`: epoch 1 reads its shards as they land; train.data.landing).
    Running the same config again resumes its run (or returns it, when it has finished)."""
    cfg = load_train(config)
    if progress is not None:
        cfg.progress = progress
    start = time.perf_counter()
    store = Store.from_config(cfg.store)
    store.check_reachable()
    if landing is None:
        checked = check(cfg, store)  # bad input fails here, before Ray starts
    else:
        checked = check(cfg, store, landing.cache(), landing.column)

    from raycache.train.console import quiet_ray_train

    quiet_ray_train()
    cache, spec = prepare(cfg, checked, None if landing is None else
                          len(landing.column(checked[0].manifest.key_column)))
    if spec.num_workers:  # local mode runs in this process: no Ray cluster to start or join
        from raycache.compute.cluster import check_store_for_cluster

        cluster(cfg)
        check_store_for_cluster(cache.store)
        _check_cluster(cfg, spec.num_workers)
    else:
        check_local(cfg.resources)
    if landing is not None:
        spec = landing.runspec(spec)
    store = spec.store
    record = read_record(store, spec.run_dir)
    if record and record["status"] == "finished" and ckpt.latest(store, spec.run_dir):
        return _result(cache, spec, start, {"resumed_from": []})
    base = {**spec.record(), "started": (record or {}).get("started")}
    base = {k: v for k, v in base.items() if v is not None}
    write_record(store, spec.run_dir, base, "running")
    try:
        result = trainer(cache, spec, cfg.checkpoints.max_failures,
                         cfg.resources.cpus_per_worker).fit()
        if result.error is not None:
            raise result.error
    except Exception as exc:
        error = _failed(exc, spec, base)
        if error is exc:
            raise
        raise error from exc
    if landing is not None:
        cache = landing.result().cache  # committed: the first epoch's validation waited for it
    out = _result(cache, spec, start, result.return_value or {})
    best = {spec.recipe.evaluation.monitor: _best(out, spec)}
    if out.sweep:
        best = {spec.select: out.best[spec.select], "member": out.best["member"],
                "settings": out.best["settings"]}
    write_record(store, spec.run_dir, base, "finished", best=best,
                 metrics={k: v for k, v in out.metrics.items() if k != "placement"})
    return out


def _check_cluster(cfg: TrainConfig, workers: int) -> None:
    """The workers against the cluster's nodes (asked of an autoscaling one), before Ray Train
    starts: a ConfigError rather than a wait without end."""
    from raycache.compute.pool import nodes
    from raycache.train import resources

    found = resources.problems(cfg.resources, workers, nodes())
    if found:
        raise ConfigError(found)
    if cfg.resources.autoscaling:
        from ray.autoscaler.sdk import request_resources

        request_resources(**resources.request(cfg.resources, workers))


def _failed(exc: Exception, spec: RunSpec, base: dict[str, Any]) -> RaycacheError:
    """The error a failed run raises (a worker's raycache error as its own type), with the run
    recorded as failed; what running it again does, said only where it is true."""
    typed = next((e for e in getattr(exc, "worker_failures", {}).values()
                  if isinstance(e, RaycacheError)), None)  # e.g. a worker's CorruptShard
    error = typed or (exc if isinstance(exc, RaycacheError) else None)
    store, again = spec.store, ""
    try:
        write_record(store, spec.run_dir, base, "failed", error=f"{type(exc).__name__}: {exc}",
                     **({"resumable": False} if isinstance(error, DivergedError) else {}))
        path = ckpt.latest(store, spec.run_dir)
        again = (f"it resumes from its checkpoint {path.rsplit('/', 1)[-1]} when run again "
                 "with the same config" if path else
                 "it saved no checkpoint, so running it again starts over")
    except Exception as store_exc:  # the store itself failed: say so, not "it resumes"
        again = (f"the store {store.uri!r} failed too ({type(store_exc).__name__}: "
                 f"{store_exc}); check that it is reachable and writable, then run again")
    if type(error) is StoreError:  # the store failed under the run: what running again does
        return StoreError(f"{error}; training run {spec.run_name!r}: {again}")
    if error is not None:
        return error
    return RaycacheError(f"training run {spec.run_name!r} failed: {type(exc).__name__}: {exc}; "
                         f"{again}")


def _best(out: TrainResult, spec: RunSpec) -> float | None:
    monitor = spec.recipe.evaluation.monitor
    values = [m[monitor] for m in out.history if monitor in m]
    if not values:
        return None
    return max(values) if spec.recipe.evaluation.mode == "max" else min(values)


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


