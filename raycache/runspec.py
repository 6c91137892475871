"""RunSpec: the typed, versioned, frozen contract between the training driver and its workers."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from raycache.config import GroupsConfig
from raycache.heads import HeadSpec
from raycache.store import Store

__all__ = ["RUN_SPEC_VERSION", "Recipe", "RunSpec", "digest"]

RUN_SPEC_VERSION = 1


@dataclass(frozen=True)
class Recipe:
    """How to train: the TrainConfig fields that shape the optimisation (see TrainConfig)."""

    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    optimizer: str
    momentum: float
    nesterov: bool
    schedule: str
    warmup_steps: int
    step_epochs: int
    gamma: float
    plateau_patience: int
    grad_accum: int
    precision: str
    grad_clip: float
    label_smoothing: float
    class_weights: tuple[float, ...] | str | None
    monitor: str
    mode: str
    early_stopping: bool
    patience: int
    min_delta: float
    compile: bool
    empty_cache_every: int
    val_fraction: float
    seed: int
    objective: str = "classification"
    groups: GroupsConfig = GroupsConfig()
    distance: str = "cosine"
    metrics_k: tuple[int, ...] = (1, 5, 10)

    @classmethod
    def from_config(cls, cfg: Any) -> Recipe:
        kw = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)}
        if isinstance(kw["class_weights"], list):
            kw["class_weights"] = tuple(float(w) for w in kw["class_weights"])
        if kw["mode"] == "auto":
            kw["mode"] = "min" if kw["monitor"].endswith("loss") else "max"
        kw["metrics_k"] = tuple(kw["metrics_k"])
        return cls(**kw)

    def better(self, new: float, old: float) -> bool:
        """Whether `new` improves on `old` by more than min_delta, in this recipe's mode."""
        if self.mode == "max":
            return new > old + self.min_delta
        return new < old - self.min_delta


@dataclass(frozen=True)
class RunSpec:
    """Built once on the driver (raycache.train.prepare), never mutated, sent to every worker."""

    head: HeadSpec
    recipe: Recipe
    run_name: str
    key: str
    rows: int
    placement: str
    """stream, cpu or gpu (auto resolved on the driver)."""
    num_workers: int
    """0: Ray Train local mode (in the driver process); else DDP workers."""
    use_gpu: bool
    class_weights: tuple[float, ...] | None
    """Per-class loss weights, resolved on the driver ("balanced" from the label counts)."""
    store: Store
    """Where the shards and the run folder are; never written into a checkpoint."""
    shards: tuple[tuple[str, int], ...]
    """(path, rows) of every shard, in manifest order."""
    run_dir: str
    """The run folder in the store's filesystem form: <cache>/runs/<run_name>."""
    checkpoint_every: int
    checkpoint_seconds: float
    prefetch_batches: int
    progress: bool
    version: int = RUN_SPEC_VERSION

    @property
    def world(self) -> int:
        return max(self.num_workers, 1)

    def record(self) -> dict[str, Any]:
        """What a run folder keeps about the run: everything but the store and its options."""
        return {"version": self.version, "run_name": self.run_name,
                "head": self.head.to_dict(), "recipe": dataclasses.asdict(self.recipe),
                "placement": self.placement, "num_workers": self.num_workers,
                "rows": self.rows, "digest": self.digest()}

    def digest(self) -> str:
        return digest(self.head, self.recipe)


def digest(head: HeadSpec, recipe: Recipe) -> str:
    """A hash of what decides a run's result: the head (with the cache's fill) and the recipe."""
    what = {"head": head.to_dict(), "recipe": dataclasses.asdict(recipe),
            "version": RUN_SPEC_VERSION}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
