"""TrainConfig: what a training run reads, trains and saves, with its local checks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raycache._cache.config import StoreConfig
from raycache._core.config import AUTO, is_name, non_finite, sweepable
from raycache._core.trust import problems as trust_problems
from raycache._train.config.recipe import (
    MONITOR_MODES,
    PLACEMENTS,
    SOLVERS,
    TRAIN_PRECISIONS,
    CheckpointConfig,
    EvalConfig,
    LoopConfig,
    LossConfig,
    OptimConfig,
    ResourcesConfig,
    ScheduleConfig,
)
from raycache._train.config.similarity import GroupsConfig, PairsConfig

__all__ = ["FLAT", "GROUPS", "MONITOR_MODES", "PLACEMENTS", "SOLVERS", "TRAIN_PRECISIONS",
           "CheckpointConfig", "EvalConfig", "GroupsConfig", "LoopConfig", "LossConfig",
           "OptimConfig", "PairsConfig", "ResourcesConfig", "ScheduleConfig", "TrainConfig",
           "regroup", "sweepable"]

@dataclass
class TrainConfig:
    """A training run: the cache and columns, the head, the objective, groups of settings.

    `raycache.train` takes this, or the same as a dict or a YAML file; a flat key of a group
    (`lr: 0.01`, written before the groups) still loads into its group.

    Example:
        ```python
        cfg = raycache.TrainConfig(cache="docs", head="mlp", hidden=[512])
        cfg.optim = dataclasses.replace(cfg.optim, lr=3e-3)
        run = raycache.train(cfg)   # or {"cache": "docs", "optim": {"lr": 3e-3}, ...}
        ```
    """

    cache: str
    """Name of a committed cache in the store."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """The store that holds the cache ($RAYCACHE_STORE, else .raycache/store)."""
    fingerprint: str | None = None
    """Which fill of the cache; the newest committed one when left out."""
    encoders: list[str] | None = None
    """Embedding columns to train on, concatenated; all of them when left out."""
    label: str | None = None
    """Label column; the cache's first one when left out."""
    objective: str = "classification"
    """What the head learns, a key of raycache._train.objectives.OBJECTIVES: classification
    (the label column holds class ids), groups (it holds group ids: similarity learning) or pairs (a
    table of scored pairs of keys: similarity learning; no label column needed)."""
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    """objective: groups: the loss and its settings."""
    pairs: PairsConfig = field(default_factory=PairsConfig)
    """objective: pairs: the pairs table, its columns, the loss and its settings."""
    embedding_dim: int = 128
    """Similarity objectives: width of the head's output embedding."""
    normalize: bool = False
    """L2-normalise the head's output (for similarity heads)."""
    head: str = sweepable("linear", sweep="head families, e.g. [linear, mlp]")
    """Head family, a key of raycache._heads.HEADS (linear, mlp, stacked, widening, gated,
    skip) or "module:function"."""
    hidden: list[int] | str = sweepable(AUTO, sweep="hidden widths per head, e.g. [[256], [512]]")
    """mlp, stacked, skip: hidden layer widths. auto: [256], and for an mlp classifier trained
    alone (no sweep, no trainable encoder) [256] and [1024] in one pass, the better on the
    validation rows served (raycache._train.defaults.resolve_hidden)."""
    dropout: float = sweepable(0.0, sweep="e.g. [0.0, 0.1]")
    """Dropout rate of the head's layers (a linear head: on its input)."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """Epochs, batches, seed."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The optimizer, learning rate, accumulation, clipping, precision."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """The learning-rate schedule and its warmup."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss's settings: label smoothing, class weights, the similarity distance."""
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    """Validation rows, the monitored metric, early stopping, the weights served."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """Workers, GPUs and where each holds its part of the rows."""
    checkpoints: CheckpointConfig = field(default_factory=CheckpointConfig)
    """How often the run saves, and how often Ray Train restarts it."""
    views: bool | str = "auto"
    """A cache filled with views: draw one view per training row per epoch (seeded by the
    epoch's seed and the row's key, so reruns and resumes repeat it); validation uses the
    clean embeddings. auto: use them when the cache has them; false: clean rows only."""
    verify: bool = True
    """Check each shard's size and sha256 against the manifest the first time a worker reads it
    in a run (a mismatch stops the run, naming the shard and `raycache repair`)."""
    trust_code: bool | list[str] = False
    """Let the cache's manifest name code to run: a trainable torch encoder's factory (true for
    any, or a list of allowed prefixes, [mypkg.]); false: only what this process's own fill
    config named (a head family here is your own code, and runs)."""
    run_name: str | None = None
    """Run folder under the cache's runs/; derived from this config when left out, so running
    the same config again resumes (or returns) that run."""
    resume: bool = True
    """Continue the run of the same name from its last checkpoint; false starts a new run
    (a new derived name, or an error if run_name already holds one)."""
    progress: bool = True
    """Print one line per epoch, and show Ray Data progress bars while streaming shards."""
    tracking: list[Any] = field(default_factory=list)
    """Live experiment tracking, each epoch's metrics as it ends: `mlflow`, `wandb` (the
    `tracking` extra), or a mapping with its `kind` and settings, e.g. `{kind: mlflow,
    tracking_uri: "file:./mlruns", experiment_name: docs}`, or `package.module:Class` (a
    raycache.TrainCallback of your own); rank 0 calls them as each epoch ends."""
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    """Many heads in one pass: values to try per setting (raycache._train.sweep.grid.KEYS:
    optim.lr, optim.weight_decay, head, hidden, ...); every combination trains on the same
    batches, each with its own optimizer and early stopping, and the best by `select` is saved."""
    select: str | None = None
    """Sweep: the metric that picks the best head (`monitor` when left out)."""
    select_mode: str = "auto"
    """Sweep: min or max for `select`; auto: min for *loss, max otherwise."""

    @staticmethod
    def moved(data: dict[str, Any]) -> dict[str, Any]:
        """A config dict with each flat key of a grouped setting moved into its group.

        Configs written before the groups (`lr: 0.01`) keep working: `optim: {lr: 0.01}`.

        Args:
            data: A TrainConfig as a dict (flat, dotted or grouped keys).

        Returns:
            The same settings, every grouped one under its group.

        Example:
            ```python
            raycache.TrainConfig.moved({"cache": "docs", "lr": 0.01})
            # {"cache": "docs", "optim": {"lr": 0.01}}
            ```
        """
        return regroup(data)

    def problems(self) -> list[str]:
        """Local checks (the groups' own: the loader walks them); those that consult the head,
        optimizer, schedule and objective registries, and the sweep, are in train.driver.plan.

        Returns:
            One line per problem, naming the field by its path (`optim.lr=...`), the value and
            what is expected; empty when there is none.

        Example:
            ```python
            raycache.TrainConfig(cache="docs", dropout=1.5).problems()
            # ["dropout=1.5: expected a value in [0, 1), e.g. 0.1"]
            ```
        """
        out = trust_problems(self.trust_code)  # the groups' own: the loader walks them
        if self.views not in (True, False, AUTO):
            out.append(f"views={self.views!r}: expected true, false or 'auto'")
        if self.run_name is not None and not is_name(self.run_name):
            out.append(f"run_name={self.run_name!r}: use letters, digits, '-', '_' or '.'")
        if self.optim.precision == "float16" and not self.resources.use_gpu:
            out.append("optim.precision='float16' needs a GPU (resources.use_gpu: true): CPU "
                       "autocast has no float16 grad scaling; use optim.precision: bfloat16 on "
                       "CPU")
        if self.embedding_dim < 1:
            out.append(f"embedding_dim={self.embedding_dim}: must be >= 1, e.g. 128")
        if self.select_mode not in MONITOR_MODES:
            out.append(f"select_mode={self.select_mode!r}: expected one of {MONITOR_MODES}")
        if not 0.0 <= self.dropout < 1.0:
            out.append(f"dropout={self.dropout}: expected a value in [0, 1), e.g. 0.1")
        if (self.hidden != AUTO if isinstance(self.hidden, str)
                else any(h < 1 for h in self.hidden)):
            out.append(f"hidden={self.hidden!r}: expected a list of layer widths >= 1, e.g. "
                       "[256], or 'auto'")
        return non_finite(self) + out


GROUPS: dict[str, type] = {"loop": LoopConfig, "optim": OptimConfig,
                           "schedule": ScheduleConfig, "loss": LossConfig,
                           "evaluation": EvalConfig, "resources": ResourcesConfig,
                           "checkpoints": CheckpointConfig}
"""TrainConfig's groups of settings, by the key that holds each."""
FLAT: dict[str, tuple[str, str]] = {
    f.metadata.get("flat", f.name): (group, f.name)
    for group, cls in GROUPS.items() for f in dataclasses.fields(cls)}
"""Each grouped setting's flat (pre-group) key -> (its group, its name there)."""


def regroup(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict with its flat keys of grouped settings (`lr`) and dotted keys
    (`optim.lr`) moved into their groups (a sweep's keys stay as written: see sweep.grid)."""
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in GROUPS and isinstance(value, dict):
            out[key] = {**out.get(key, {}), **value}
            continue
        group, dot, name = key.partition(".")
        if key in FLAT:
            group, name = FLAT[key]
        elif not (dot and group in GROUPS):
            out[key] = value
            continue
        holder = out.setdefault(group, {})
        if isinstance(holder, dict):
            holder[name] = value
    return out
