"""The per-worker training loop that Ray Train runs (in the driver in local mode, else on each
DDP worker): set up, resume, then epochs of steps; metrics all-reduced, logged by rank 0, and
reported to Ray Train only with a checkpoint. The objective (raycache.objectives) supplies the
loss, what counts as a hit, and the validation metrics."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist

from raycache import checkpoint as ckpt
from raycache.heads import build_head
from raycache.metrics_log import epoch_line, write_artifacts, write_metrics
from raycache.objectives import REGISTRY as OBJECTIVES
from raycache.objectives import Evaluator, Objective
from raycache.objectives.gather import lockstep
from raycache.optim import Schedule, build_optimizer
from raycache.runspec import RunSpec
from raycache.shares import InMemory, Streamed

__all__ = ["train_loop"]

KEEP_CHECKPOINTS = 2
# Slots of the per-epoch sums all-reduced across workers.
TRAIN_LOSS, TRAIN_HIT, TRAIN_N, VAL_LOSS, VAL_HIT, VAL_N, SAVE_NOW = range(7)


@dataclass
class Progress:
    """What survives a restart besides the weights: epoch, early stopping, history."""

    epoch: int = 0
    best: float | None = None
    best_epoch: int = 0
    bad_epochs: int = 0
    stopped: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)


@dataclass
class Parts:
    """The objects a step needs, built once per worker."""

    spec: RunSpec
    base: torch.nn.Module
    """The head itself (its state_dict is what gets saved)."""
    model: torch.nn.Module
    """What the step calls: the head (with the loss's learnable parts, when it has any), maybe
    DDP-wrapped and compiled."""
    opt: torch.optim.Optimizer
    schedule: Schedule
    scaler: torch.amp.GradScaler
    objective: Objective
    device: torch.device
    best_weights: dict[str, torch.Tensor] | None = None


class Trained(torch.nn.Module):
    """The head and the loss's learnable parts as one module, so that DDP averages the
    gradients of both; it computes what the head computes."""

    def __init__(self, head: torch.nn.Module, criterion: torch.nn.Module):
        super().__init__()
        self.head, self.criterion = head, criterion

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x)


def holders(spec: RunSpec, rank: int, device: torch.device) -> tuple[Any, Any]:
    """(train, validation) data of this worker, in the spec's placement."""
    custom = OBJECTIVES[spec.recipe.objective].holders
    if custom is not None:
        return custom(spec, rank, device)
    if spec.placement == "stream":
        return Streamed(spec, rank, False, device), Streamed(spec, rank, True, device)
    if spec.placement == "gpu" and device.type != "cuda":
        raise RuntimeError("placement 'gpu' needs use_gpu: true and a CUDA device")
    return InMemory.for_worker(spec, rank, device if spec.placement == "gpu" else
                               torch.device("cpu"))


def steps_per_epoch(spec: RunSpec, train_rows: int | None) -> int:
    rows = train_rows if train_rows else spec.rows * (1 - spec.recipe.val_fraction) / spec.world
    return max(math.ceil(rows / spec.recipe.batch_size / spec.recipe.grad_accum), 1)


def build_parts(spec: RunSpec, device: torch.device, train_rows: int | None) -> Parts:
    r = spec.recipe
    base = build_head(spec.head).to(device)
    objective = OBJECTIVES[r.objective].build(spec, device)
    learnable = list(objective.criterion.parameters())
    opt = build_optimizer([*base.parameters(), *learnable], r)
    if r.precision == "float16" and device.type != "cuda":
        raise RuntimeError(f"precision='float16' needs a CUDA device, but this worker has "
                           f"{device.type}; use precision: bfloat16 on CPU")
    model = Trained(base, objective.criterion) if learnable else base
    return Parts(spec, base, model, opt, Schedule(opt, r, steps_per_epoch(spec, train_rows)),
                 torch.amp.GradScaler(device.type, enabled=r.precision == "float16"),
                 objective, device)


def restore(parts: Parts) -> Progress:
    """Load the latest checkpoint of this run: Ray Train's (after a worker restart, or a driver
    restart under DDP), else the newest complete one in the run folder (local mode)."""
    given = ray.train.get_checkpoint()
    state = None
    if given is not None:
        with given.as_directory() as d, open(f"{d}/{ckpt.STATE}", "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=False)
    else:
        path = ckpt.latest(parts.spec.store, parts.spec.run_dir)
        if path is not None:
            state = ckpt.read_state(parts.spec.store, path)
    if state is None:
        return Progress()
    parts.base.load_state_dict(state["model"])
    if "criterion" in state:
        parts.objective.criterion.load_state_dict(state["criterion"])
    parts.opt.load_state_dict(state["optimizer"])
    parts.schedule.load_state_dict(state["schedule"])
    parts.scaler.load_state_dict(state["scaler"])
    parts.best_weights = state["best_weights"]
    ckpt.set_rng_state(state["rng"])
    progress = Progress(**state["progress"])
    progress.resumed_from.append(progress.epoch)
    return progress


def wrap(parts: Parts) -> None:
    """DDP across workers (after the weights are restored), then torch.compile if asked."""
    if parts.spec.world > 1:
        parts.model = ray.train.torch.prepare_model(parts.model, move_to_device=False)
    if parts.spec.recipe.compile:
        parts.model = compile_or_eager(parts.model, parts.spec.head.in_dim, parts.device)


def compile_or_eager(model: torch.nn.Module, in_dim: int, device: torch.device) -> Any:
    """torch.compile, checked on a dummy batch; eager with a message where it cannot compile."""
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(torch.zeros(2, in_dim, device=device))
        return compiled
    except Exception as exc:  # inductor raises many types (no compiler, unsupported op, ...)
        say(f"compile: true could not compile the head here ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); training in eager mode")
        return model


def autocast(parts: Parts) -> Any:
    p = parts.spec.recipe.precision
    if p == "float32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if p == "bfloat16" else torch.float16
    return torch.autocast(parts.device.type, dtype=dtype)


def epoch_seed(spec: RunSpec, epoch: int, rank: int) -> int:
    """Every epoch's randomness (shuffle, dropout) depends only on (seed, epoch, rank), so a
    resumed run repeats exactly what an uninterrupted one would have done."""
    return spec.recipe.seed * 1_000_003 + epoch * 7_919 + rank


def train_epoch(parts: Parts, data: Any, seed: int, sums: torch.Tensor,
                then: int | None = None) -> None:
    """One pass over the training share: micro-batches, accumulation, clipping, stepping
    (`then`: the next epoch's seed, so a streamed share can read ahead for it)."""
    r, model = parts.spec.recipe, parts.model
    model.train()
    accum = r.grad_accum
    ddp = isinstance(parts.model, torch.nn.parallel.DistributedDataParallel)
    join = parts.model.join() if ddp else contextlib.nullcontext()
    micro = 0
    batches = data.batches(r.batch_size, seed=seed, then=then)
    if parts.objective.gathers:
        batches = lockstep(batches, parts.device)  # every worker at every gathering step
    with join:
        for x, y in batches:
            x, y = x.to(parts.device, non_blocking=True), y.to(parts.device, non_blocking=True)
            micro += 1
            last = micro % accum == 0
            sync = contextlib.nullcontext() if (last or not ddp) else parts.model.no_sync()
            with sync:
                with autocast(parts):
                    out = model(x)
                loss, value = parts.objective.loss(out.float(), y)
                parts.scaler.scale(loss / accum).backward()
            if last:
                step(parts)
            sums[TRAIN_LOSS] += value.double() * len(y)
            sums[TRAIN_HIT] += parts.objective.hits(out.detach().float(), y)
            sums[TRAIN_N] += len(y)
    if micro % accum:
        step(parts)  # the epoch's last, partial accumulation


def step(parts: Parts) -> None:
    r = parts.spec.recipe
    if r.grad_clip > 0:
        parts.scaler.unscale_(parts.opt)
        params = [p for group in parts.opt.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, r.grad_clip)
    parts.scaler.step(parts.opt)
    parts.scaler.update()
    parts.opt.zero_grad(set_to_none=True)
    parts.schedule.step_batch()
    every = r.empty_cache_every
    if every and parts.device.type == "cuda" and parts.schedule.step_no % every == 0:
        torch.cuda.empty_cache()


def evaluate(parts: Parts, data: Any, sums: torch.Tensor) -> Evaluator:
    """Validation loss and hits into `sums`; the objective's metrics fed (computed later, when
    every worker is done, since computing them is a collective)."""
    parts.model.eval()
    metrics = parts.objective.evaluator()
    with torch.inference_mode():
        for x, y in data.batches(parts.spec.recipe.batch_size * 4, seed=None):
            x, y = x.to(parts.device, non_blocking=True), y.to(parts.device, non_blocking=True)
            with autocast(parts):
                out = parts.base(x).float()
            sums[VAL_LOSS] += parts.objective.eval_loss(out, y).double() * len(y)
            sums[VAL_HIT] += parts.objective.hits(out, y)
            sums[VAL_N] += len(y)
            metrics.update(out, y)
    return metrics


def epoch_metrics(parts: Parts, s: list[float], epoch: int, seconds: float,
                  extra: dict[str, float] | None = None) -> dict[str, Any]:
    """The epoch's metrics: losses and accuracies from the summed slots, then the objective's
    (which may refine val_acc, e.g. as precision@1 over every worker's validation rows)."""
    return {
        "epoch": epoch + 1,
        "train_loss": s[TRAIN_LOSS] / max(s[TRAIN_N], 1),
        "train_acc": s[TRAIN_HIT] / max(s[TRAIN_N], 1),
        "val_loss": s[VAL_LOSS] / max(s[VAL_N], 1),
        "val_acc": s[VAL_HIT] / max(s[VAL_N], 1),
        "train_rows": int(s[TRAIN_N]),
        "val_rows": int(s[VAL_N]),
        "lr": parts.opt.param_groups[0]["lr"],
        "epoch_seconds": seconds,
        "rows_per_s": s[TRAIN_N] / max(seconds, 1e-9),
        "placement": parts.spec.placement,
        **(extra or {}),
    }


def track_best(parts: Parts, progress: Progress, metrics: dict[str, Any]) -> None:
    """Best epoch on the monitored metric (its weights kept), and early stopping."""
    r = parts.spec.recipe
    value = metrics.get(r.monitor)
    if value is None:
        raise RuntimeError(f"monitor={r.monitor!r} is not a metric; expected one of "
                           f"{sorted(k for k in metrics if k != 'placement')}")
    if progress.best is None or r.better(value, progress.best):
        progress.best, progress.best_epoch, progress.bad_epochs = value, metrics["epoch"], 0
        parts.best_weights = {k: v.detach().cpu().clone()
                              for k, v in parts.base.state_dict().items()}
    else:
        progress.bad_epochs += 1
        progress.stopped = r.early_stopping and progress.bad_epochs >= r.patience
    parts.schedule.step_epoch(value, r.better)


def save(parts: Parts, progress: Progress, rank: int) -> None:
    """Report to Ray Train with the whole state attached by rank 0 (local mode: write it to
    the run folder here, since local mode keeps checkpoints in memory only)."""
    spec, metrics = parts.spec, progress.history[-1]
    name = ckpt.checkpoint_name(progress.epoch)
    if rank != 0:
        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    state = {
        "model": parts.base.state_dict(), "criterion": parts.objective.criterion.state_dict(),
        "optimizer": parts.opt.state_dict(),
        "schedule": parts.schedule.state_dict(), "scaler": parts.scaler.state_dict(),
        "best_weights": parts.best_weights, "rng": ckpt.rng_state(),
        "progress": vars(progress),
    }
    use_best = spec.recipe.early_stopping and parts.best_weights is not None
    head_weights = parts.best_weights if use_best else parts.base.state_dict()
    info = {"metrics": metrics, "best": {spec.recipe.monitor: progress.best,
                                         "epoch": progress.best_epoch},
            "weights": "best" if use_best else "last", "history": progress.history}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt.write_folder(tmp, spec.head, head_weights, state, info)
        if spec.num_workers == 0:
            ckpt.upload(spec.store, tmp, f"{spec.run_dir}/{name}")
            ckpt.prune(spec.store, spec.run_dir, KEEP_CHECKPOINTS)
            ray.train.report(metrics)
        else:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                             checkpoint_dir_name=name)
    write_metrics(spec.store, spec.run_dir, progress.history)


def quiet_ray_train() -> None:
    """No INFO dumps per report ("Reporting training result ...", "Reported metrics ...")."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)


def say(line: str) -> None:
    """One line to stdout, once: Ray Train's worker print() goes both to stdout and to a
    logger, which showed every epoch twice."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """Train the head on this worker's share; returns the history and where it resumed."""
    spec: RunSpec = config["spec"]
    quiet_ray_train()
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    device = (ray.train.torch.get_device() if spec.num_workers else
              torch.device("cuda" if spec.use_gpu else "cpu"))
    train_data, val_data = holders(spec, rank, device)
    torch.manual_seed(spec.recipe.seed)  # the same initial weights on every worker and run
    parts = build_parts(spec, device, len(train_data) or None)
    progress = restore(parts)
    wrap(parts)
    r, last_save, started = spec.recipe, time.monotonic(), time.monotonic()
    first = progress.epoch
    while progress.epoch < r.epochs and not progress.stopped:
        epoch, t0 = progress.epoch, time.perf_counter()
        torch.manual_seed(epoch_seed(spec, epoch, rank))
        sums = torch.zeros(7, dtype=torch.float64, device=device)
        then = epoch_seed(spec, epoch + 1, rank) if epoch + 1 < r.epochs else None
        train_epoch(parts, train_data, epoch_seed(spec, epoch, rank), sums, then)
        evaluator = evaluate(parts, val_data, sums)
        extra = evaluator.compute()  # a collective, on every worker
        due = spec.checkpoint_seconds and time.monotonic() - last_save >= spec.checkpoint_seconds
        sums[SAVE_NOW] = float(rank == 0 and bool(due))
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
        metrics = epoch_metrics(parts, sums.tolist(), epoch, time.perf_counter() - t0, extra)
        metrics["wall_s"] = time.monotonic() - started  # since this worker's loop began
        progress.epoch = epoch + 1
        progress.history.append(metrics)
        track_best(parts, progress, metrics)
        if rank == 0 and spec.progress:
            pace = (time.monotonic() - started) / (progress.epoch - first)
            say(epoch_line(metrics, r.epochs, pace * (r.epochs - progress.epoch)))
        every = spec.checkpoint_every
        end = progress.epoch == r.epochs or progress.stopped
        if end or sums[SAVE_NOW] > 0 or (every and progress.epoch % every == 0):
            save(parts, progress, rank)
            last_save = time.monotonic()
    if rank == 0:
        write_artifacts(spec.store, spec.run_dir, progress.history)
    return {"history": progress.history, "resumed_from": progress.resumed_from}
