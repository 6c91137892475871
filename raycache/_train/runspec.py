"""A run's spec, decided once on the driver: what a user reads of it (RunSpec, with its Recipe)
and the typed, versioned, frozen contract the driver sends its workers (WorkerSpec: the same
and the plumbing: the store, the shards, checkpoint timing)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from raycache._cache.store import Store
from raycache._fit.part import Reading
from raycache._heads.specs import HeadSpec
from raycache._train.config import (
    EvalConfig,
    GroupsConfig,
    LoopConfig,
    LossConfig,
    OptimConfig,
    PairsConfig,
    ScheduleConfig,
    TrainConfig,
)
from raycache._train.defaults import resolve, resolve_lr

__all__ = ["RUN_SPEC_VERSION", "Member", "Recipe", "RunSpec", "WorkerSpec", "digest",
           "sweep_record"]

RUN_SPEC_VERSION = 1


@dataclass(frozen=True)
class Recipe:
    """How a run trains, every auto setting resolved: the objective and TrainConfig's groups
    (loop, optim, schedule, loss, evaluation, groups, pairs), so that every setting of theirs
    reaches the workers and the run digest. `RunSpec.recipe`.

    Example:
        ```python
        recipe = raycache.train({"cache": "docs"}).spec.recipe
        recipe.loop.epochs, recipe.loop.batch_size, recipe.optim.lr  # what auto chose
        ```
    """

    loop: LoopConfig = LoopConfig()
    """Epochs, batch size, seed (autos resolved)."""
    optim: OptimConfig = OptimConfig()
    """The optimizer and its learning rate (auto resolved)."""
    schedule: ScheduleConfig = ScheduleConfig()
    """The learning-rate schedule."""
    loss: LossConfig = LossConfig()
    """The loss's settings (class weights as a tuple)."""
    evaluation: EvalConfig = EvalConfig()
    """Validation, the monitored metric and its mode (auto resolved), early stopping."""
    objective: str = "classification"
    """What the head learns: classification, groups or pairs."""
    groups: GroupsConfig = GroupsConfig()
    """objective: groups: its loss and settings."""
    pairs: PairsConfig = PairsConfig()
    """objective: pairs: the pairs table and its loss."""

    @classmethod
    def from_config(cls, cfg: TrainConfig, rows: int | None = None, workers: int = 0,
                    l1: float | None = None) -> Recipe:
        """The config's recipe groups as they are, but lists as tuples, `mode: auto` resolved
        by the monitored metric, and the other auto settings by raycache._train.defaults for a
        cache of `rows` (unknown: batch_size auto is its largest) trained on `workers`, whose
        features' mean L1 norm is `l1`.

        Args:
            cfg: The training config.
            rows: The cache's rows (None: unknown).
            workers: DDP workers (0: this process).
            l1: The features' mean L1 norm, for lr auto (None: unknown).

        Returns:
            The recipe.
        """
        cfg = resolve(cfg, rows, workers)
        optim = dataclasses.replace(cfg.optim, lr=resolve_lr(cfg, l1))
        loss, ev = cfg.loss, cfg.evaluation
        if isinstance(loss.class_weights, list):
            loss = dataclasses.replace(
                loss, class_weights=tuple(float(w) for w in loss.class_weights))
        mode = ev.mode if ev.mode != "auto" else "min" if ev.monitor.endswith("loss") else "max"
        ev = dataclasses.replace(ev, mode=mode, metrics_k=tuple(ev.metrics_k))
        return cls(loop=cfg.loop, optim=optim, schedule=cfg.schedule, loss=loss,
                   evaluation=ev, objective=cfg.objective, groups=cfg.groups, pairs=cfg.pairs)

    def better(self, new: float, old: float) -> bool:
        """Whether `new` improves on `old` by more than min_delta, in this recipe's mode.

        Args:
            new: A value of the monitored metric.
            old: The best value so far.

        Returns:
            True where `new` is better.
        """
        if self.evaluation.mode == "max":
            return new > old + self.evaluation.min_delta
        return new < old - self.evaluation.min_delta


@dataclass(frozen=True)
class Member:
    """One head of a sweep: the settings that set it apart, and its head and recipe."""

    settings: tuple[tuple[str, Any], ...]
    """(sweep key, value) pairs; list values as tuples."""
    head: HeadSpec
    """The member's head."""
    recipe: Recipe
    """The member's recipe (its own optimizer settings, early stopping)."""

    def settings_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.settings}


@dataclass(frozen=True)
class RunSpec:
    """What a training run does, as the driver decided it: the head, the recipe with every auto
    resolved, where it trains and why, the run folder. `TrainResult.spec`.

    Example:
        ```python
        spec = raycache.train({"cache": "docs"}).spec
        spec.run_name, spec.num_workers, spec.placement, spec.recipe.loop.epochs
        ```
    """

    head: HeadSpec
    """The head trained: family, shape, encoders, label (a sweep: the config's head, each
    member's own settings in `sweep`)."""
    recipe: Recipe
    """How it trains: the loop, optimizer, schedule, loss and evaluation, autos resolved."""
    run_name: str
    """The run folder's name under the cache's runs/."""
    run_dir: str
    """The run folder in the store's filesystem form: `<cache>/runs/<run_name>`."""
    rows: int
    """The cache's rows."""
    placement: str
    """Where each worker holds its part of the rows: stream, cpu or gpu (auto resolved)."""
    num_workers: int
    """0: in the driver process, without Ray Train; else DDP workers."""
    use_gpu: bool
    """One GPU per worker."""
    why: str = ""
    """Why it trains where it does (num_workers: auto's reason)."""
    class_weights: tuple[float, ...] | None = None
    """Per-class loss weights ("balanced" resolved from the label counts)."""
    sweep: tuple[dict[str, Any], ...] = ()
    """A sweep's members' settings, one dict each; empty for a single head."""
    select: str = "val_loss"
    """Sweep: the metric that picks the best member."""
    select_mode: str = "min"
    """Sweep: min or max for `select` (auto resolved)."""
    views: int = 0
    """K: training draws one of each row's K cached views per epoch; 0 trains on clean rows."""
    view_encoders: tuple[str, ...] = ()
    """The head's encoders whose views columns it trains on."""
    version: int = RUN_SPEC_VERSION
    """The spec's layout version, recorded in run.json."""

    def digest(self) -> str:
        """A hash of what decides the run's result (run.json's `digest`).

        Returns:
            The sha256, hex: the same for runs that must train the same head.
        """
        record = ({"sweep": [dict(m) for m in self.sweep], "select": self.select,
                   "select_mode": self.select_mode} if self.sweep else {})
        return digest(self.head, self.recipe, record, self.views)


@dataclass(frozen=True)
class WorkerSpec:
    """What a training run does, decided once on the driver, never mutated, sent to every
    worker: the RunSpec a user reads (`run`, whose fields it reads through: `spec.head`,
    `spec.recipe`, ...) and the plumbing the workers need (the store, shards and their checks,
    checkpoint timing, a fill under way).

    Built by raycache._train.driver.plan.prepare from a TrainConfig and the cache (`of`).
    """

    run: RunSpec
    """What a user reads of the run (TrainResult.spec); its fields read through this spec."""
    key: str
    """The cache's key column (the validation split hashes it)."""
    store: Store
    """Where the shards and the run folder are; never written into a checkpoint."""
    shards: tuple[tuple[str, int], ...]
    """(path, rows) of every shard, in manifest order."""
    checkpoint_every: int
    """Epochs between checkpoints (0: only after the last epoch and on checkpoint_seconds)."""
    checkpoint_seconds: float
    """Also checkpoint when this many seconds have passed since the last one (0: never)."""
    prefetch_batches: int
    """stream placement: batches read ahead of the training step."""
    progress: bool
    """Print one line per epoch."""
    sweep: tuple[Member, ...] = ()
    """A sweep's members, trained together on the same batches; empty for a single head (the
    RunSpec's `sweep` holds their settings)."""
    checks: tuple[tuple[int, str], ...] = ()
    """(bytes, sha256) of every shard, in `shards` order, what a worker checks a shard against
    on its first read in a run; empty: shards are read unchecked (TrainConfig.verify false)."""
    overlap_feed: str = ""
    """The id of a fill still under way on the driver, whose shards the first training pass
    reads as they land (`_train.data.overlap`; DDP workers ask its OverlapFeed actor by that
    name); empty: a committed cache."""
    keeps: tuple[tuple[str, int], ...] = ()
    """(row selection, rows in the file) of every shard, in `shards` order, where a version
    shares older versions' shards (raycache._cache.entry_rows.Selection; "" keeps every row);
    empty: every shard is read whole."""
    tracking: tuple[Any, ...] = ()
    """TrainConfig.tracking's entries, built into callbacks by rank 0 (not in the digest)."""

    @classmethod
    def of(cls, **fields: Any) -> WorkerSpec:
        """A spec from the RunSpec's fields and its own, by name (a sweep's members give the
        RunSpec its settings)."""
        run = {k: fields.pop(k) for k in RUN_FIELDS if k in fields and k != "sweep"}
        members = fields.get("sweep", ())
        return cls(run=RunSpec(**run, sweep=tuple(m.settings_dict() for m in members)),
                   **fields)

    def __getattr__(self, name: str) -> Any:
        """The RunSpec's fields, read through (`spec.head`: `spec.run.head`)."""
        run = self.__dict__.get("run")
        if run is None or name not in RUN_FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(run, name)

    def replace(self, **changes: Any) -> WorkerSpec:
        """This spec with `changes` to its own fields or its RunSpec's."""
        run = {k: changes.pop(k) for k in RUN_FIELDS if k in changes and k != "sweep"}
        if "sweep" in changes:
            run["sweep"] = tuple(m.settings_dict() for m in changes["sweep"])
        return dataclasses.replace(self, run=dataclasses.replace(self.run, **run), **changes)

    @functools.cached_property
    def reading(self) -> Reading:
        """How a worker reads its part of the rows (raycache._fit.part)."""
        return Reading(self.store, f"{self.head.cache}/{self.head.fingerprint}", self.shards,
                       self.checks, self.keeps)

    @property
    def world(self) -> int:
        """Processes that train: the DDP workers, or 1 in local mode."""
        return max(self.num_workers, 1)

    def view(self) -> RunSpec:
        """What a user reads of this spec (TrainResult.spec): no plumbing."""
        return self.run

    def members(self) -> list[WorkerSpec]:
        """One spec per head trained: the sweep's members, or this run's one head.

        Returns:
            For a sweep, this spec with each member's head and recipe (and no sweep); else
            `[self]`.
        """
        if not self.sweep:
            return [self]
        return [self.replace(head=m.head, recipe=m.recipe, sweep=())
                for m in self.sweep]

    def sweep_record(self) -> dict[str, Any]:
        """What run.json says of the sweep.

        Returns:
            The members' settings, `select` and `select_mode`; empty for a single head.
        """
        return sweep_record(self.sweep, self.select, self.select_mode)

    def record(self) -> dict[str, Any]:
        """What a run folder keeps about the run (run.json): never the store or its options.

        Returns:
            The version, run name, head spec, recipe, placement, workers, rows, digest and
            the sweep record.
        """
        return {"version": self.version, "run_name": self.run_name,
                "head": self.head.to_dict(), "recipe": dataclasses.asdict(self.recipe),
                "placement": self.placement, "num_workers": self.num_workers,
                "rows": self.rows, "digest": self.digest(), **self.sweep_record()}

    def digest(self) -> str:
        """A hash of what decides the run's result (see the module's `digest`).

        Returns:
            The sha256, hex: the same for runs that must train the same head.
        """
        return digest(self.head, self.recipe, self.sweep_record(), self.views)


RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(RunSpec))
"""The RunSpec's fields, which a WorkerSpec reads through rather than copies."""


def sweep_record(sweep: tuple[Member, ...], select: str, mode: str) -> dict[str, Any]:
    """What a run record says of its sweep (empty for a single head)."""
    if not sweep:
        return {}
    return {"sweep": [m.settings_dict() for m in sweep], "select": select, "select_mode": mode}


def digest(head: HeadSpec, recipe: Recipe, sweep: dict[str, Any] | None = None,
           views: int = 0) -> str:
    """A hash of what decides a run's result: the head (with the cache's fill), the recipe, a
    sweep's members and selection when there is one, and whether it trains on views."""
    settings = dataclasses.asdict(recipe)
    if recipe.objective != "pairs":  # a pairs table's settings matter to pairs runs only
        settings.pop("pairs")
    if recipe.optim.encoder_lr is None:  # nor encoder_lr without trainable encoders
        settings["optim"].pop("encoder_lr")
    if recipe.optim.solver in ("gradient", "auto"):  # runs trained by gradient keep their names
        settings["optim"].pop("solver")
    what = {"head": head.to_dict(), "recipe": settings, "version": RUN_SPEC_VERSION,
            **(sweep or {}), **({"views": views} if views else {})}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
