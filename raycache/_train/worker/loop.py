"""train_loop, what Ray Train runs on each DDP worker (or the driver calls, in-process): assemble,
resume, then epochs of training and validation, metrics all-reduced, logged by rank 0, and
reported to Ray Train only with a checkpoint (a head solved by L-BFGS: one epoch, the solve).
A sweep's heads (a WorkerHeads) train on the same batches in the same pass, each with its own
optimizer, schedule and early stopping."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from raycache._train.console import epoch_text, quiet_ray_train, say_progress
from raycache._train.folder.metrics import write_artifacts
from raycache._train.runspec import WorkerSpec
from raycache._train.tracking.live import Live
from raycache._train.worker.assemble import build_heads, data_sources, wrap
from raycache._train.worker.best_epoch import end_sweep_epoch, sweep_rows, track_best
from raycache._train.worker.diverged import check_finite
from raycache._train.worker.epoch import (
    FINITE,
    SAVE_NOW,
    SLOTS,
    TRAIN_LOSS,
    epoch_metrics,
    epoch_seed,
    evaluate,
    train_epoch,
)
from raycache._train.worker.heads import WorkerHeads
from raycache._train.worker.input_stats import fit_inputs
from raycache._train.worker.state import restore, save
from raycache._train.worker.warm import first_epoch, start_linear

__all__ = ["quiet_ray_train", "train_loop"]


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """Train the head (or a sweep's heads) on this worker's part; returns the history, where
    it resumed, and a sweep's per-member records. Rank 0 writes each epoch as it ends (Live)."""
    spec: WorkerSpec = config["spec"]
    quiet_ray_train()
    rank, device = 0, torch.device("cuda" if spec.use_gpu else "cpu")
    if spec.num_workers:  # on a Ray Train worker (in-process, Ray Train is never imported)
        import ray.train.torch

        rank, device = ray.train.get_context().get_world_rank(), ray.train.torch.get_device()
    live = Live(spec) if rank == 0 else None
    try:
        out = epochs_of(spec, rank, device, live)
    except BaseException as e:
        if live is not None:
            live.failed(e)
        raise
    if live is not None:
        live.end(out["history"])
    return out


def epochs_of(spec: WorkerSpec, rank: int, device: torch.device, live: Live | None
              ) -> dict[str, Any]:
    """The run on this worker: assemble, resume, the solve or the epochs, the artifacts."""
    train_data, val_data = data_sources(spec, rank, device)
    heads = build_heads(spec, device, len(train_data) or None)
    restore(heads)
    if not heads.run.epoch:  # a resumed run's heads hold their standardisation already
        fit_inputs(heads, train_data)
    warm = start_linear(heads, train_data) if not heads.run.epoch else None
    wrap(heads)
    epochs, last_save = spec.recipe.loop.epochs, time.monotonic()
    ended = EpochEnd(heads, rank, live, time.monotonic(), heads.run.epoch)
    if spec.recipe.optim.solver == "lbfgs" and not heads.run.epoch:  # one epoch: the solve
        from raycache._train.worker.solved import solve_head

        rows, extras, seconds = solve_head(heads, train_data, val_data)
        ended(0, rows, extras, seconds, due=True, pace=seconds)
    if warm is not None:  # an mlp started as the linear head: that is its first epoch
        rows, extras = first_epoch(heads, train_data, val_data, warm)
        ended(0, rows, extras, warm["solve_seconds"], due=True, pace=warm["solve_seconds"])
    while heads.run.epoch < epochs and not heads.run.stopped:
        epoch, t0 = heads.run.epoch, time.perf_counter()
        torch.manual_seed(epoch_seed(spec, epoch, rank))
        sums = torch.zeros(len(heads.members), SLOTS, dtype=torch.float64, device=device)
        then = epoch_seed(spec, epoch + 1, rank) if epoch + 1 < epochs else None
        steps_before = heads.members[0].schedule.step_no
        train_epoch(heads, train_data, epoch_seed(spec, epoch, rank), sums, then)
        evaluators = evaluate(heads, val_data, sums)
        if heads.stack is not None:
            heads.stack.pull()  # each member's head, for its best weights and checkpoint
        due = spec.checkpoint_seconds and time.monotonic() - last_save >= spec.checkpoint_seconds
        sums[0, SAVE_NOW] = float(rank == 0 and bool(due))
        local = sums[:, [TRAIN_LOSS, FINITE]].cpu()  # this worker's, for where it diverged
        # collectives, on every worker, in the same order
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
        total = sums.tolist()
        check_finite(heads, epoch, total, local, steps_before, rank)
        extras = (evaluators[0].compute_each() if heads.stack is not None
                  else [e.compute() for e in evaluators])
        if ended(epoch, total, extras, time.perf_counter() - t0, due=bool(sums[0, SAVE_NOW] > 0)):
            last_save = time.monotonic()
    out = {"history": heads.run.history, "resumed_from": heads.run.resumed_from}
    if rank == 0:
        write_artifacts(spec.store, spec.run_dir, heads.run.history)
    if spec.sweep and heads.run.history:
        out["sweep"] = sweep_rows(heads)
    return out


@dataclass(frozen=True)
class EpochEnd:
    """What ends an epoch (the solve and a linear start count as one): on every worker its
    metrics recorded; on rank 0 its line, the checkpoint when one is due and the live
    trackers told."""

    heads: WorkerHeads
    rank: int
    live: Live | None
    started: float
    """The loop's time.monotonic() start."""
    first: int
    """The epoch the loop began at (a resumed run's)."""

    def __call__(self, epoch: int, rows: list[list[float]], extras: list[dict[str, float]],
                 seconds: float, *, due: bool, pace: float | None = None) -> bool:
        """End `epoch`; `due`: a checkpoint is asked for (one is also written at the run's end
        and every checkpoint_every epochs); `pace`: seconds an epoch for the time left (the
        loop's mean where None). Whether it saved."""
        heads, spec = self.heads, self.heads.spec
        record(heads, epoch, rows, extras, seconds, time.monotonic() - self.started)
        run, every = heads.run, spec.checkpoint_every
        end = run.epoch == spec.recipe.loop.epochs or run.stopped
        if self.rank == 0 and spec.progress:
            mean = (time.monotonic() - self.started) / max(run.epoch - self.first, 1)
            say_progress(progress_line(heads, mean if pace is None else pace), final=end)
        saved = bool(due or end or (every and run.epoch % every == 0))
        if saved:
            save(heads, self.rank)
        if self.live is not None:
            self.live.epoch_end(run.history, saved)
        return saved


def record(heads: WorkerHeads, epoch: int, rows: list[list[float]], extras: list[dict[str, float]],
           seconds: float, wall: float) -> None:
    """Each head still training: the epoch's metrics into its history, its best epoch and
    early stopping; a sweep: its leader and run-level progress."""
    latest = []
    for kit, progress, row, extra in zip(heads.members, heads.progress, rows, extras,
                                           strict=True):
        metrics = epoch_metrics(kit, row, epoch, seconds, extra)
        metrics["wall_s"] = wall  # since this worker's loop began
        latest.append(metrics)
        if not progress.stopped:
            progress.epoch = epoch + 1
            progress.history.append(metrics)
            track_best(kit, progress, metrics)
    if heads.spec.sweep:
        end_sweep_epoch(heads, latest)


def progress_line(heads: WorkerHeads, pace: float) -> str:
    """The epoch's line (raycache._train.console): its metrics, the monitored one included, or
    a sweep's leader by name; and the time left at `pace` seconds an epoch."""
    spec, epochs = heads.spec, heads.spec.recipe.loop.epochs
    sweep = [m.settings_dict() for m in spec.sweep]
    return epoch_text(heads.run.history[-1], epochs, spec.recipe.evaluation.monitor,
                      pace * (epochs - heads.run.epoch), sweep, spec.select)
