"""TrainConfig's groups of settings (loop, optim, schedule, loss, evaluation, resources,
checkpoints): each a small dataclass with its own checks, declared once."""

from __future__ import annotations

from dataclasses import dataclass, field

from raycache._core.config import AUTO, positive, positive_or_auto, sweepable, worker_problems

__all__ = ["MONITOR_MODES", "PLACEMENTS", "SOLVERS", "TRAIN_PRECISIONS", "CheckpointConfig",
           "EvalConfig", "LoopConfig", "LossConfig", "OptimConfig", "ResourcesConfig",
           "ScheduleConfig"]

PLACEMENTS = ("auto", "stream", "cpu", "gpu")
TRAIN_PRECISIONS = ("float32", "bfloat16", "float16")
MONITOR_MODES = ("auto", "min", "max")
SOLVERS = ("auto", "gradient", "lbfgs")


@dataclass(frozen=True)
class OptimConfig:
    """optim: the optimizer and how each step is taken.

    Example:
        ```python
        optim = raycache.OptimConfig(lr=3e-3, weight_decay=0.01, grad_clip=1.0)
        cfg = raycache.TrainConfig(cache="docs", optim=optim)
        ```
    """

    lr: float | str = sweepable(AUTO, sweep="peak learning rate, e.g. [1e-3, 3e-3]")
    """Peak learning rate (after warmup); auto: the head family's, scaled by batch size
    (raycache._train.defaults)."""
    encoder_lr: float | None = None
    """Peak learning rate of the cache's trainable encoders (their own parameter group, on the
    same schedule); lr when left out. Pre-trained encoders usually want 10-100x less."""
    weight_decay: float = sweepable(0.0, sweep="e.g. [0.0, 0.01]")
    """Weight decay (decoupled for adamw, L2 for the others); 0 turns it off."""
    optimizer: str = "adamw"
    """adamw, adam, sgd, rmsprop or adagrad (raycache._train.optim.OPTIMIZERS)."""
    momentum: float = sweepable(0.9, sweep="sgd and rmsprop momentum, e.g. [0.0, 0.9]")
    """sgd and rmsprop: momentum."""
    nesterov: bool = False
    """sgd: Nesterov momentum."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (no DDP all-reduce on the accumulating ones)."""
    grad_clip: float = 0.0
    """Clip the gradients' global norm to this; 0 turns clipping off."""
    precision: str = "float32"
    """float32, bfloat16 (autocast on CPU and GPU) or float16 (autocast and a grad scaler; GPU
    only): the same names as an encoder's precision."""
    solver: str = AUTO
    """How the head learns: gradient (epochs of `optimizer` steps on batches), lbfgs (a linear
    classifier only: its logistic regression solved full batch, the L2 strength chosen on a
    fifth of the training rows, never the validation rows), or auto: lbfgs where that is
    possible (one process, the rows in memory, no views or sweep) and no setting of the
    gradient path is given (raycache._train.defaults)."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = positive(self, "grad_accum")
        if self.lr != AUTO and (isinstance(self.lr, str) or self.lr <= 0):
            out.append(f"lr={self.lr!r}: must be > 0, e.g. 1e-3, or 'auto'")
        if self.encoder_lr is not None and self.encoder_lr <= 0:
            out.append(f"encoder_lr={self.encoder_lr}: must be > 0, e.g. 2e-5, or left out "
                       "to use lr")
        if self.solver not in SOLVERS:
            out.append(f"solver={self.solver!r}: expected one of {SOLVERS}")
        if self.precision not in TRAIN_PRECISIONS:
            out.append(f"precision={self.precision!r}: expected one of {TRAIN_PRECISIONS}")
        for name in ("grad_clip", "weight_decay"):
            if getattr(self, name) < 0:
                out.append(f"{name}={getattr(self, name)}: must be >= 0 (0 turns it off)")
        if not 0.0 <= self.momentum < 1.0:
            out.append(f"momentum={self.momentum}: expected a value in [0, 1), e.g. 0.9")
        elif self.nesterov and self.optimizer == "sgd" and self.momentum == 0:
            out.append("nesterov=true needs momentum > 0 (got momentum=0); set momentum: 0.9, "
                       "or nesterov: false")
        return out


@dataclass(frozen=True)
class ScheduleConfig:
    """schedule: the learning rate over the run.

    Example:
        ```python
        schedule = raycache.ScheduleConfig(kind="cosine", warmup_steps=100)
        cfg = raycache.TrainConfig(cache="docs", schedule=schedule)
        ```
    """

    kind: str = field(default="constant", metadata={"flat": "schedule"})
    """constant, cosine, linear, one-cycle, step or plateau (reduce-on-plateau)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup from 0 to lr, before the schedule."""
    step_epochs: int = 10
    """step: epochs between LR drops by `gamma`."""
    gamma: float = 0.1
    """step and plateau: factor the LR is multiplied by at each drop."""
    plateau_patience: int = 2
    """plateau: epochs without improvement of `monitor` before the LR drops."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = positive(self, "step_epochs", "plateau_patience")
        if self.warmup_steps < 0:
            out.append(f"warmup_steps={self.warmup_steps}: must be >= 0")
        if not 0.0 < self.gamma <= 1.0:
            out.append(f"gamma={self.gamma}: expected a factor in (0, 1], e.g. 0.1")
        return out


@dataclass(frozen=True)
class LossConfig:
    """loss: settings of the objective's loss shared by objectives.

    Example:
        ```python
        loss = raycache.LossConfig(class_weights="balanced", label_smoothing=0.1)
        cfg = raycache.TrainConfig(cache="docs", loss=loss)
        ```
    """

    label_smoothing: float = sweepable(0.0, sweep="classification, e.g. [0.0, 0.1]")
    """Cross-entropy label smoothing, in [0, 1)."""
    class_weights: list[float] | str | None = None
    """Per-class loss weights: a list (one per class), "balanced" (inverse frequency), or none."""
    distance: str = "cosine"
    """Similarity objectives: cosine, dot, euclidean or manhattan (losses, miners, retrieval)."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = []
        if not 0.0 <= self.label_smoothing < 1.0:
            out.append(f"label_smoothing={self.label_smoothing}: expected a value in [0, 1)")
        if isinstance(self.class_weights, str) and self.class_weights != "balanced":
            out.append(f"class_weights={self.class_weights!r}: expected 'balanced' or a list "
                       "of one weight per class")
        if isinstance(self.class_weights, list) and any(w < 0 for w in self.class_weights):
            out.append(f"class_weights={self.class_weights}: weights must be >= 0")
        return out


@dataclass(frozen=True)
class LoopConfig:
    """loop: epochs, batches and the randomness of the training loop.

    Example:
        ```python
        cfg = raycache.TrainConfig(cache="docs", loop=raycache.LoopConfig(epochs=20))
        ```
    """

    epochs: int | str = AUTO
    """auto: until `monitor` stops improving (early stopping), from min_epochs to max_epochs."""
    min_epochs: int = 5
    """epochs: auto: epochs before early stopping may stop the run."""
    max_epochs: int = 50
    """epochs: auto: epochs at most."""
    batch_size: int | str = AUTO
    """Rows per step on each worker (one micro-batch when grad_accum > 1); auto: about 50
    steps an epoch, from 32 to 256 rows (raycache._train.defaults)."""
    seed: int = 0
    """Seeds the head's initial weights, the batches' order and the views drawn."""
    compile: bool = False
    """torch.compile the head (falls back to eager, with a message, where it cannot compile)."""
    empty_cache_every: int = 0
    """GPU: torch.cuda.empty_cache() every N optimizer steps; 0 never."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = positive_or_auto(self, "epochs", "batch_size") + positive(self, "min_epochs")
        if self.max_epochs < self.min_epochs:
            out.append(f"max_epochs={self.max_epochs}: must be >= min_epochs "
                       f"({self.min_epochs})")
        if self.empty_cache_every < 0:
            out.append(f"empty_cache_every={self.empty_cache_every}: must be >= 0")
        return out


@dataclass(frozen=True)
class EvalConfig:
    """evaluation: the validation rows, their metrics, the best epoch and early stopping.

    Example:
        ```python
        evaluation = raycache.EvalConfig(monitor="val_acc", patience=3)
        cfg = raycache.TrainConfig(cache="docs", evaluation=evaluation)
        ```
    """

    monitor: str = AUTO
    """Metric that picks the best epoch (and drives early stopping and the plateau schedule);
    auto: the metric the objective reports, val_acc for classification, val_loss otherwise."""
    mode: str = "auto"
    """min or max for `monitor`; auto: min for *loss, max otherwise (accuracy, F1, retrieval)."""
    early_stopping: bool | str = AUTO
    """Stop when `monitor` has not improved by min_delta for `patience` epochs (with epochs:
    auto, not before loop.min_epochs); auto: on with epochs: auto, off with a number."""
    weights: str = "best"
    """The weights the checkpoint serves (load_head, predict): best (the best epoch's on
    `monitor`) or last (the last epoch's); the last state is kept for resuming either way."""
    patience: int | str = AUTO
    """Early stopping: epochs without an improvement of `monitor` before the run stops; auto:
    10 for an mlp classifier (its val_acc still rises after 5 flat epochs), 5 otherwise
    (raycache._train.defaults.PATIENCE)."""
    min_delta: float = 0.0
    """The least change of `monitor` that counts as an improvement; 0: any."""
    val_fraction: float = 0.2
    """Fraction of rows held out for validation, chosen by a hash of the key (stable across
    runs)."""
    metrics_k: list[int] = field(default_factory=lambda: [1, 5, 10])
    """k of the top-k metrics: top-k accuracy (classification); precision, recall and mAP at
    k over the validation rows (groups)."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = positive_or_auto(self, "patience")
        if not 0.0 < self.val_fraction < 1.0:
            out.append(f"val_fraction={self.val_fraction}: expected a value in (0, 1), e.g. 0.2")
        if self.early_stopping not in (True, False, AUTO):
            out.append(f"early_stopping={self.early_stopping!r}: expected true, false or "
                       "'auto'")
        if self.weights not in ("best", "last"):
            out.append(f"weights={self.weights!r}: expected 'best' or 'last'")
        if self.mode not in MONITOR_MODES:
            out.append(f"mode={self.mode!r}: expected one of {MONITOR_MODES}")
        if self.min_delta < 0:
            out.append(f"min_delta={self.min_delta}: must be >= 0 (0 turns it off)")
        if not self.metrics_k or any(k < 1 for k in self.metrics_k):
            out.append(f"metrics_k={self.metrics_k}: expected a list of whole numbers >= 1, "
                       "e.g. [1, 5, 10]")
        return out


@dataclass(frozen=True)
class ResourcesConfig:
    """resources: the workers, and where each holds its part of the rows.

    Example:
        ```python
        resources = raycache.ResourcesConfig(num_workers=4, use_gpu=True)
        cfg = raycache.TrainConfig(cache="docs", resources=resources)
        ```
    """

    num_workers: int | str = "auto"
    """DDP workers; 0 trains in the driver process (no Ray); auto: 0 on one node,
    else one per node, or one per GPU (use_gpu, a cache over 512 MiB): see resolve_workers."""
    cpus_per_worker: float = 0.5
    """Fractional CPUs leave room for Ray Data's read tasks on small machines."""
    use_gpu: bool = False
    """One GPU per worker, NCCL between them."""
    placement: str = "auto"
    """Where each worker holds its part of the rows: stream (read every epoch), cpu, gpu, or
    auto."""
    prefetch_batches: int = 4
    """stream: batches read ahead of the training step."""
    autoscaling: bool = False
    """The cluster adds nodes on demand (KubeRay autoscaler): ask for the workers' resources
    and wait for them, instead of refusing workers the cluster cannot hold now."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        out = positive(self, "prefetch_batches")
        if self.placement not in PLACEMENTS:
            out.append(f"placement={self.placement!r}: expected one of {PLACEMENTS}")
        if self.placement == "gpu" and not self.use_gpu:
            out.append("placement='gpu' needs use_gpu: true (or use placement: cpu)")
        return out + worker_problems(self, "DDP")


@dataclass(frozen=True)
class CheckpointConfig:
    """checkpoints: how often the run saves, and how often Ray Train restarts it.

    Example:
        ```python
        checkpoints = raycache.CheckpointConfig(every=5, max_failures=1)
        cfg = raycache.TrainConfig(cache="docs", checkpoints=checkpoints)
        ```
    """

    every: int = field(default=0, metadata={"flat": "checkpoint_every"})
    """Epochs between checkpoints; 0 saves only after the last epoch (and on `seconds`)."""
    seconds: float = field(default=300.0, metadata={"flat": "checkpoint_seconds"})
    """Also checkpoint when this many seconds have passed since the last one; 0 turns it off."""
    max_failures: int = 3
    """Times Ray Train restarts a failed worker group, resuming from the last checkpoint."""

    def problems(self) -> list[str]:
        """Local checks of this group's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected;
            empty when there is none.
        """
        return [f"{name}={getattr(self, name)}: must be >= 0"
                for name in ("every", "seconds", "max_failures") if getattr(self, name) < 0]
