"""Dataclass configs for fill and train, loaded from YAML or dicts, every problem in one error."""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from raycache.errors import ConfigError
from raycache.manifest import input_column
from raycache.secrets import seal

__all__ = [
    "AUTO",
    "DEFAULT_STORE",
    "DUPLICATES",
    "PLACEMENTS",
    "PRECISIONS",
    "SOURCE_FORMATS",
    "STORAGE_DTYPES",
    "STORE_ENV",
    "EncoderConfig",
    "FillConfig",
    "GroupsConfig",
    "PairsConfig",
    "SourceConfig",
    "StoreConfig",
    "TrainConfig",
    "ViewsConfig",
    "default_store",
    "load",
    "parse_value",
]

DEFAULT_STORE = ".raycache/store"
STORE_ENV = "RAYCACHE_STORE"


def default_store() -> str:
    """The store a config that names none uses: $RAYCACHE_STORE, else a local folder."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE


STORAGE_DTYPES = ("float32", "float16")
PRECISIONS = ("float32", "bfloat16", "float16")
AUTO = "auto"
SOURCE_FORMATS = ("parquet", "jsonl", "csv")
PLACEMENTS = ("auto", "stream", "cpu", "gpu")
DUPLICATES = ("error", "first", "last")


@dataclass
class StoreConfig:
    uri: str = field(default_factory=default_store)
    """Where caches live: a local folder, or s3://bucket/prefix or any fsspec URI
    ($RAYCACHE_STORE, else .raycache/store, when left out)."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options (e.g. client_kwargs.endpoint_url). Credentials (key, secret,
    token, ...; raycache.secrets) are used but never written or shown; the environment works
    too."""
    shared: bool = False
    """Set when a local-folder store is mounted on every node (NFS), to allow multi-node use."""
    timeout_s: float = 300.0
    """Seconds one object-store write or read may take before it fails (a hung endpoint then
    fails the fill with a StoreError instead of stalling it; the fill resumes when run again)."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)


@dataclass
class SourceConfig:
    path: str | list[str]
    """File, folder or glob (or a list of them), local or any fsspec URI."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the file suffix when left out."""
    key: str = "id"
    """Column whose value identifies a row; it travels into the cache."""
    labels: list[str] = field(default_factory=list)
    """Label columns copied into the cache as they are."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the source (credentials as in store.options)."""
    version: str | None = None
    """A version you name for sources whose files carry no mtime or ETag."""
    duplicates: str = "error"
    """Rows that share a key: error (the fill commits nothing and lists a few), or keep the
    first or the last of them in source order (files sorted, then rows)."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)


@dataclass
class EncoderConfig:
    name: str
    """Name of the encoder; its embeddings land in a column of this name."""
    kind: str
    """Encoder family, a key of raycache.encoders.REGISTRY (hf-text, torch)."""
    input: str
    """Source column fed to the encoder."""
    path: str | None = None
    """hf-text: a local model folder, or pkg:<package>/<folder> inside an installed package."""
    factory: str | None = None
    """torch: "package.module:function" returning a torch.nn.Module."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """torch: keyword arguments for the factory (part of the fingerprint)."""
    max_length: int = 256
    """hf-text: tokens kept per input."""
    normalize: bool = True
    """hf-text: L2-normalise the pooled embedding."""
    dtype: str = "float32"
    """Storage dtype of the embedding column: float32 or float16."""
    precision: str = "float32"
    """Inference precision: float32, bfloat16 or float16 (autocast; part of the fingerprint).
    On a GPU bfloat16/float16 are faster; on CPUs without bf16 units they are slower."""
    trainable: bool = False
    """Trained with the head: its outputs change as it learns, so the fill does not encode it
    but stores its input (hf-text: token ids) in column `<name>__input`, and training runs it
    live beside the cached frozen columns (torch and hf-text)."""


@dataclass
class ViewsConfig:
    """Cached augmentation views: K augmented copies of each row's input, each encoded."""

    count: int
    """K: views cached per row (one embedding each, besides the clean one)."""
    augment: list[dict[str, Any]]
    """Steps applied in order, each {kind: <raycache.augment.REGISTRY key>, **params}, e.g.
    [{kind: word_dropout, p: 0.1}, {kind: word_swap, swaps: 1}, {kind: crop, max_words: 64}]."""
    seed: int = 0
    """View v of a row is drawn from (seed, the sha256 of the row's input, v): the same views
    whatever the batching, shard size or worker."""
    encoders: list[str] | None = None
    """Encoders that get views (their inputs augmented); all of them when left out."""

    def problems(self, encoders: list[str]) -> list[str]:
        import inspect

        from raycache.augment import REGISTRY

        out = []
        if self.count < 1:
            out.append(f"views.count={self.count}: must be >= 1 (views per row), e.g. 4; "
                       "leave views out for a cache without views")
        if not self.augment:
            out.append("views.augment: empty; list at least one step, e.g. "
                       "[{kind: word_dropout, p: 0.1}]")
        for i, step in enumerate(self.augment):
            kind = step.get("kind")
            if kind not in REGISTRY:
                out.append(f"views.augment[{i}].kind={kind!r}: unknown; expected one of "
                           f"{sorted(REGISTRY)}")
                continue
            params = {k: v for k, v in step.items() if k != "kind"}
            try:
                inspect.signature(REGISTRY[kind]).bind(None, None, **params)
            except TypeError as exc:
                out.append(f"views.augment[{i}] ({kind}): {exc}; its parameters are "
                           f"{list(inspect.signature(REGISTRY[kind]).parameters)[2:]}")
        for name in self.encoders or []:
            if name not in encoders:
                out.append(f"views.encoders: {name!r} is not an encoder of this fill; "
                           f"expected some of {encoders}")
        return out


@dataclass
class FillConfig:
    name: str
    """Cache name: caches live at <store>/<name>/<fingerprint>/."""
    source: SourceConfig
    encoders: list[EncoderConfig]
    store: StoreConfig = field(default_factory=StoreConfig)
    batch_size: int | str = AUTO
    """Rows per encoder forward pass at most (auto: 256 on CPU, 4096 on GPU)."""
    token_budget: int | str = AUTO
    """Padded tokens per forward pass at most, for text: rows are sorted by length and cut into
    batches under this budget (auto: 2048 on CPU, 65536 on GPU)."""
    concurrency: int | str = AUTO
    """Encoder actors in the pool (auto: sized from the cluster's CPUs, or GPUs / num_gpus)."""
    num_gpus: float = 0.0
    """GPUs per encoder actor (0 runs CPU actors; 0.25 puts four actors on a GPU)."""
    num_cpus: float | str = AUTO
    """CPUs per encoder actor; its torch threads follow (auto: 1 with a GPU, else up to 4)."""
    rows_per_shard: int = 1024
    """Rows per encoder call and per Parquet shard."""
    autoscaling: bool = False
    """The cluster adds nodes on demand (KubeRay autoscaler): ask for the pool's resources
    and wait for them, instead of refusing a pool the cluster cannot hold now."""
    in_process: bool | str = AUTO
    """Run the same stages (read, prepare, encode, write) in this process, without Ray: no
    start-up, for small fills. auto: in-process for a CPU fill of at most 20,000 Parquet rows
    to encode when no Ray cluster is running or named (RAY_ADDRESS); else Ray Data."""
    views: ViewsConfig | None = None
    """Cache K augmented views of each row per encoder too (a column <encoder>@views); training
    draws one per row per epoch. Part of the fingerprint."""
    reuse: bool = True
    """Take the embeddings that caches in the store already hold for the same encoder and the
    same input value (by a sha256 of the input, per row) instead of encoding them again."""
    progress: bool = True
    """Show one progress bar (rows, rows/s, ETA) and the summary."""
    verbose: bool = False
    """Show Ray's and Ray Data's own logs and progress bars too."""

    def problems(self) -> list[str]:
        from raycache.encoders import REGISTRY

        out = _positive(self, "rows_per_shard")
        out += _positive_or_auto(self, "batch_size", "token_budget", "concurrency")
        if self.num_gpus < 0:
            out.append(f"num_gpus={self.num_gpus}: must be >= 0 (0 runs CPU actors)")
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            out.append(f"num_gpus={self.num_gpus}: above 1 it must be a whole number of GPUs")
        if self.num_cpus != AUTO and (isinstance(self.num_cpus, str) or self.num_cpus <= 0):
            out.append(f"num_cpus={self.num_cpus!r}: expected a number > 0, or 'auto'")
        if self.in_process not in (True, False, AUTO):
            out.append(f"in_process={self.in_process!r}: expected true, false or 'auto'")
        elif self.in_process is True and self.num_gpus > 0:
            out.append("in_process=true runs no Ray actors, so num_gpus does not apply; set "
                       "num_gpus: 0, or in_process: auto to encode on GPU actors")
        if not _is_name(self.name):
            out.append(f"name={self.name!r}: use letters, digits, '-', '_' or '.'")
        if self.source.format not in (None, *SOURCE_FORMATS):
            out.append(f"source.format={self.source.format!r}: expected one of {SOURCE_FORMATS}")
        if self.source.duplicates not in DUPLICATES:
            out.append(f"source.duplicates={self.source.duplicates!r}: expected one of "
                       f"{DUPLICATES}")
        if not self.encoders:
            out.append("encoders: empty; list at least one frozen encoder")
        if self.views is not None:
            out += self.views.problems([e.name for e in self.encoders])
        names = [e.name for e in self.encoders]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            out.append(f"encoders: name {dup!r} is used twice; each needs its own column")
        for e in self.encoders:
            where = f"encoders[{e.name}]"
            if e.kind not in REGISTRY:
                out.append(f"{where}.kind={e.kind!r}: unknown; expected one of {sorted(REGISTRY)}")
            if e.dtype not in STORAGE_DTYPES:
                out.append(f"{where}.dtype={e.dtype!r}: expected one of {STORAGE_DTYPES}")
            if e.precision not in PRECISIONS:
                out.append(f"{where}.precision={e.precision!r}: expected one of {PRECISIONS}")
            if e.trainable and e.kind in REGISTRY and REGISTRY[e.kind].live is None:
                trainables = sorted(k for k, f in REGISTRY.items() if f.live is not None)
                out.append(f"{where}.trainable=true: kind {e.kind!r} cannot be trained; "
                           f"trainable encoders are of kinds {trainables}, or set trainable: "
                           "false to cache its embeddings")
            if e.trainable and input_column(e.name) in (self.source.key, *self.source.labels,
                                                        *names):
                out.append(f"{where}: its input column {input_column(e.name)!r} clashes with a "
                           "key, label or encoder column; rename the encoder")
            if e.name in (self.source.key, *self.source.labels):
                out.append(f"{where}: name clashes with a key or label column; rename it")
        return out


@dataclass(frozen=True)
class GroupsConfig:
    """objective: groups: similarity learning where the label column names each row's group
    (rows of a group are similar, rows of different groups are not)."""

    loss: str = "triplet"
    """contrastive, triplet, infonce (alias mnr: multiple-negatives ranking), arcface, cosface
    or softmax (raycache.objectives.groups.LOSSES)."""
    miner: str = "none"
    """contrastive: none (every pair) or hard (hardest positive and negative per anchor);
    triplet: none (every triplet), all (those inside the margin), hard or semihard."""
    margin: float | None = None
    """triplet: margin; contrastive: negative margin; arcface: angle (degrees); cosface:
    cosine margin. Left out: pytorch-metric-learning's default for the loss and distance."""
    pos_margin: float | None = None
    """contrastive: positive margin (default 0 for distances, 1 for similarities)."""
    scale: float | None = None
    """infonce, softmax: 1/temperature (default 20); arcface, cosface: the logit scale (64)."""
    soft_margin: bool = False
    """triplet: the soft-margin form log(1 + exp(d_ap - d_an)) instead of a hinge."""


@dataclass(frozen=True)
class PairsConfig:
    """objective: pairs: similarity learned from a table of pairs of cache keys, each with a
    score (a graded similarity, e.g. STS in [0, 1]) or a 0/1 label (Quaterion's
    SimilarityPairSample; sentence-transformers' pair losses)."""

    path: str | None = None
    """The pairs table: a Parquet or JSONL (or CSV) file, folder or glob, local or any fsspec
    URI (credentials from the environment). Its keys are joined against the cache's key."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the file suffix when left out."""
    left: str = "left"
    """Column holding the first key of each pair."""
    right: str = "right"
    """Column holding the second key of each pair."""
    score: str | None = "score"
    """Column holding the pair's score or 0/1 label; none (mnr only): every pair is a
    positive pair (anchor, positive)."""
    loss: str = "cosine"
    """contrastive (0/1 labels, margins on `distance`), cosine (MSE between the cosine of the
    two embeddings and the score) or mnr (multiple-negatives ranking over in-batch
    negatives, gathered across DDP workers)."""
    margin: float | None = None
    """contrastive: the negative margin (default 0 for similarities, 1 for distances)."""
    pos_margin: float | None = None
    """contrastive: the positive margin (default 1 for similarities, 0 for distances)."""
    scale: float = 20.0
    """mnr: the similarities' scale (1/temperature), as sentence-transformers' `scale`."""
    symmetric: bool = True
    """mnr: average the left->right and right->left losses (false: left->right only)."""
    positives: float | None = None
    """mnr: train only on pairs whose score is at least this (e.g. 1 for 0/1 labels); none:
    every pair is a positive pair. Validation keeps every pair."""


@dataclass
class TrainConfig:
    cache: str
    """Name of a committed cache in the store."""
    store: StoreConfig = field(default_factory=StoreConfig)
    fingerprint: str | None = None
    """Which fill of the cache; the newest committed one when left out."""
    encoders: list[str] | None = None
    """Embedding columns to train on, concatenated; all of them when left out."""
    label: str | None = None
    """Label column; the cache's first one when left out."""
    objective: str = "classification"
    """What the head learns, a key of raycache.objectives.REGISTRY: classification (the label
    column holds class ids), groups (it holds group ids: similarity learning) or pairs (a
    table of scored pairs of keys: similarity learning; no label column needed)."""
    groups: GroupsConfig = field(default_factory=GroupsConfig)
    """objective: groups: the loss and its settings."""
    pairs: PairsConfig = field(default_factory=PairsConfig)
    """objective: pairs: the pairs table, its columns, the loss and its settings."""
    distance: str = "cosine"
    """Similarity objectives: cosine, dot, euclidean or manhattan (losses, miners, retrieval)."""
    embedding_dim: int = 128
    """Similarity objectives: width of the head's output embedding."""
    normalize: bool = False
    """L2-normalise the head's output (for similarity heads)."""
    metrics_k: list[int] = field(default_factory=lambda: [1, 5, 10])
    """k of the top-k metrics: top-k accuracy (classification); precision, recall and mAP at
    k over the validation rows (groups)."""
    head: str = "linear"
    """Head family, a key of raycache.heads.REGISTRY (linear, mlp, stacked, widening, gated,
    skip) or "module:function"."""
    hidden: list[int] = field(default_factory=lambda: [256])
    """mlp, stacked, skip: hidden layer widths."""
    dropout: float = 0.0
    epochs: int = 10
    batch_size: int = 256
    """Rows per step on each worker (one micro-batch when grad_accum > 1)."""
    lr: float = 1e-3
    """Peak learning rate (after warmup)."""
    encoder_lr: float | None = None
    """Peak learning rate of the cache's trainable encoders (their own parameter group, on the
    same schedule); lr when left out. Pre-trained encoders usually want 10-100x less."""
    weight_decay: float = 0.0
    optimizer: str = "adamw"
    """adamw, adam, sgd, rmsprop or adagrad (raycache.optim.OPTIMIZERS)."""
    momentum: float = 0.9
    """sgd and rmsprop: momentum."""
    nesterov: bool = False
    """sgd: Nesterov momentum."""
    schedule: str = "constant"
    """LR schedule: constant, cosine, linear, one-cycle, step or plateau (reduce-on-plateau)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup from 0 to lr, before the schedule."""
    step_epochs: int = 10
    """step: epochs between LR drops by `gamma`."""
    gamma: float = 0.1
    """step and plateau: factor the LR is multiplied by at each drop."""
    plateau_patience: int = 2
    """plateau: epochs without improvement of `monitor` before the LR drops."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (no DDP all-reduce on the accumulating ones)."""
    precision: str = "float32"
    """float32, bfloat16 (autocast on CPU and GPU) or float16 (autocast and a grad scaler; GPU
    only): the same names as an encoder's precision."""
    grad_clip: float = 0.0
    """Clip the gradients' global norm to this; 0 turns clipping off."""
    label_smoothing: float = 0.0
    """Cross-entropy label smoothing, in [0, 1)."""
    class_weights: list[float] | str | None = None
    """Per-class loss weights: a list (one per class), "balanced" (inverse frequency), or none."""
    monitor: str = "val_loss"
    """Metric that picks the best epoch (and drives early stopping and the plateau schedule)."""
    mode: str = "auto"
    """min or max for `monitor`; auto: min for *loss, max otherwise (accuracy, F1, retrieval)."""
    early_stopping: bool = False
    """Stop when `monitor` has not improved by min_delta for `patience` epochs; the head saved
    is then the best epoch's weights."""
    patience: int = 5
    min_delta: float = 0.0
    compile: bool = False
    """torch.compile the head (falls back to eager, with a message, where it cannot compile)."""
    empty_cache_every: int = 0
    """GPU: torch.cuda.empty_cache() every N optimizer steps; 0 never."""
    val_fraction: float = 0.2
    """Share of rows held out for validation, chosen by a hash of the key (stable across runs)."""
    seed: int = 0
    num_workers: int | str = "auto"
    """DDP workers; 0 trains in the driver process (Ray Train local mode); auto: 0 for a cache
    that fits comfortably in one process, else DDP on every GPU (use_gpu) or 2 CPU workers."""
    cpus_per_worker: float = 0.5
    """Fractional CPUs leave room for Ray Data's read tasks on small machines."""
    use_gpu: bool = False
    """One GPU per worker, NCCL between them."""
    placement: str = "auto"
    """Where each worker keeps its share: stream (read every epoch), cpu, gpu, or auto."""
    prefetch_batches: int = 4
    """stream: batches read ahead of the training step."""
    views: bool | str = "auto"
    """A cache filled with views: draw one view per training row per epoch (seeded by the
    epoch's seed and the row's key, so reruns and resumes repeat it); validation uses the
    clean embeddings. auto: use them when the cache has them; false: clean rows only."""
    verify: bool = True
    """Check each shard's size and sha256 against the manifest the first time a worker reads it
    in a run (a mismatch stops the run, naming the shard and `raycache repair`)."""
    checkpoint_every: int = 0
    """Epochs between checkpoints; 0 saves only after the last epoch (and on checkpoint_seconds)."""
    checkpoint_seconds: float = 300.0
    """Also checkpoint when this many seconds have passed since the last one; 0 turns it off."""
    max_failures: int = 3
    """Times Ray Train restarts a failed worker group, resuming from the last checkpoint."""
    run_name: str | None = None
    """Run folder under the cache's runs/; derived from this config when left out, so running
    the same config again resumes (or returns) that run."""
    resume: bool = True
    """Continue the run of the same name from its last checkpoint; false starts a new run
    (a new derived name, or an error if run_name already holds one)."""
    progress: bool = True
    """Print one line per epoch, and show Ray Data progress bars while streaming shards."""
    sweep: dict[str, list[Any]] = field(default_factory=dict)
    """Many heads in one pass: values to try per setting (raycache.sweep.KEYS: lr,
    weight_decay, head, hidden, ...); every combination trains on the same batches, each with
    its own optimizer and early stopping, and the best by `select` is saved."""
    select: str | None = None
    """Sweep: the metric that picks the best head (`monitor` when left out)."""
    select_mode: str = "auto"
    """Sweep: min or max for `select`; auto: min for *loss, max otherwise."""

    def problems(self) -> list[str]:
        from raycache.heads import REGISTRY as HEADS
        from raycache.objectives import REGISTRY as OBJECTIVES
        from raycache.optim import OPTIMIZERS, SCHEDULES
        from raycache.sweep import problems as sweep_problems

        out = _positive(self, "epochs", "batch_size", "grad_accum", "patience",
                        "step_epochs", "plateau_patience", "prefetch_batches")
        if self.head not in HEADS and ":" not in self.head:
            out.append(f"head={self.head!r}: unknown; expected one of {sorted(HEADS)} "
                       "or 'package.module:function'")
        if not 0.0 < self.val_fraction < 1.0:
            out.append(f"val_fraction={self.val_fraction}: expected a value in (0, 1), e.g. 0.2")
        if self.placement not in PLACEMENTS:
            out.append(f"placement={self.placement!r}: expected one of {PLACEMENTS}")
        if self.views not in (True, False, AUTO):
            out.append(f"views={self.views!r}: expected true, false or 'auto'")
        if self.placement == "gpu" and not self.use_gpu:
            out.append("placement='gpu' needs use_gpu: true (or use placement: cpu)")
        if self.lr <= 0:
            out.append(f"lr={self.lr}: must be > 0, e.g. 1e-3")
        if self.encoder_lr is not None and self.encoder_lr <= 0:
            out.append(f"encoder_lr={self.encoder_lr}: must be > 0, e.g. 2e-5, or left out "
                       "to use lr")
        if self.cpus_per_worker <= 0:
            out.append(f"cpus_per_worker={self.cpus_per_worker}: must be > 0, e.g. 0.5")
        if self.run_name is not None and not _is_name(self.run_name):
            out.append(f"run_name={self.run_name!r}: use letters, digits, '-', '_' or '.'")
        if not (self.num_workers == "auto" or (isinstance(self.num_workers, int)
                                               and self.num_workers >= 0)):
            out.append(f"num_workers={self.num_workers!r}: expected 'auto', 0 (in-process) or "
                       "a number of DDP workers")
        if self.optimizer not in OPTIMIZERS:
            out.append(f"optimizer={self.optimizer!r}: expected one of {sorted(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            out.append(f"schedule={self.schedule!r}: expected one of {sorted(SCHEDULES)}")
        if self.precision not in TRAIN_PRECISIONS:
            out.append(f"precision={self.precision!r}: expected one of {TRAIN_PRECISIONS}")
        if self.precision == "float16" and not self.use_gpu:
            out.append("precision='float16' needs a GPU (use_gpu: true): CPU autocast has no "
                       "float16 grad scaling; use precision: bfloat16 on CPU")
        if self.mode not in MONITOR_MODES:
            out.append(f"mode={self.mode!r}: expected one of {MONITOR_MODES}")
        if not 0.0 <= self.label_smoothing < 1.0:
            out.append(f"label_smoothing={self.label_smoothing}: expected a value in [0, 1)")
        if isinstance(self.class_weights, str) and self.class_weights != "balanced":
            out.append(f"class_weights={self.class_weights!r}: expected 'balanced' or a list "
                       "of one weight per class")
        if isinstance(self.class_weights, list) and any(w < 0 for w in self.class_weights):
            out.append(f"class_weights={self.class_weights}: weights must be >= 0")
        for name in ("warmup_steps", "empty_cache_every", "checkpoint_every", "max_failures"):
            if getattr(self, name) < 0:
                out.append(f"{name}={getattr(self, name)}: must be >= 0")
        for name in ("grad_clip", "checkpoint_seconds", "min_delta", "weight_decay"):
            if getattr(self, name) < 0:
                out.append(f"{name}={getattr(self, name)}: must be >= 0 (0 turns it off)")
        if not 0.0 < self.gamma <= 1.0:
            out.append(f"gamma={self.gamma}: expected a factor in (0, 1], e.g. 0.1")
        if self.embedding_dim < 1:
            out.append(f"embedding_dim={self.embedding_dim}: must be >= 1, e.g. 128")
        if not self.metrics_k or any(k < 1 for k in self.metrics_k):
            out.append(f"metrics_k={self.metrics_k}: expected a list of whole numbers >= 1, "
                       "e.g. [1, 5, 10]")
        if self.objective not in OBJECTIVES:
            out.append(f"objective={self.objective!r}: unknown; expected one of "
                       f"{sorted(OBJECTIVES)}")
        else:
            out += OBJECTIVES[self.objective].problems(self)
        if self.select_mode not in MONITOR_MODES:
            out.append(f"select_mode={self.select_mode!r}: expected one of {MONITOR_MODES}")
        return out + sweep_problems(self)


TRAIN_PRECISIONS = ("float32", "bfloat16", "float16")
MONITOR_MODES = ("auto", "min", "max")


def _positive(cfg: Any, *names: str) -> list[str]:
    return [f"{n}={getattr(cfg, n)}: must be >= 1" for n in names if getattr(cfg, n) < 1]


def _positive_or_auto(cfg: Any, *names: str) -> list[str]:
    out = []
    for n in names:
        v = getattr(cfg, n)
        if v != AUTO and (isinstance(v, str) or v < 1):
            out.append(f"{n}={v!r}: expected a whole number >= 1, or 'auto'")
    return out


def _is_name(s: str) -> bool:
    return bool(s) and all(c.isalnum() or c in "-_." for c in s) and not s.startswith(".")


T = typing.TypeVar("T")


def load(cls: type[T], data: dict[str, Any] | str | Path | T) -> T:
    """Build and check a config from a dict, a YAML file path, or an instance."""
    if isinstance(data, cls):
        obj = data
    else:
        if isinstance(data, str | Path):
            path = Path(data)
            if not path.is_file():
                raise ConfigError([f"config file {str(path)!r} does not exist; check the path"])
            data = yaml.safe_load(path.read_text()) or {}
        problems: list[str] = []
        obj = _build(cls, data, cls.__name__, problems)
        if problems:
            raise ConfigError(problems)
    problems = obj.problems() if hasattr(obj, "problems") else []
    if problems:
        raise ConfigError(problems)
    return obj


def parse_value(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    """`value` checked against the type `tp` (a field's annotation), each problem appended."""
    return _value(tp, value, where, problems)


def _build(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(data, dict):
        problems.append(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in sorted(set(data) - set(fields)):
        problems.append(f"{where}.{key}: unknown field; expected one of {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                problems.append(f"{where}.{name}: missing (required)")
            continue
        kwargs[name] = _value(hints[name], data[name], f"{where}.{name}", problems)
    if problems:
        return None
    return cls(**kwargs)


def _value(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            out = _value(arg, value, where, trial)
            if not trial:
                return out
        problems.append(f"{where}={value!r}: expected {_type_name(tp)}")
        return None
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where, problems)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}={value!r}: expected a list")
            return None
        return [_value(args[0], v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}={value!r}: expected a mapping")
            return None
        return dict(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is Any or (isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    problems.append(f"{where}={value!r}: expected {_type_name(tp)}, got {type(value).__name__}")
    return None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
