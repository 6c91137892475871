"""train_loop, what Ray Train runs on each DDP worker (or the driver calls, in-process): assemble,
resume, then epochs of training and validation, metrics all-reduced, logged by rank 0, and
reported to Ray Train only with a checkpoint (a head solved by L-BFGS: one epoch, the solve).
A sweep's heads (a WorkerHeads) train on the same batches in the same pass, each with its own
optimizer, schedule and early stopping."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from raycache._train.assemble import build_team, data_sources, wrap
from raycache._train.best_epoch import end_sweep_epoch, sweep_rows, track_best
from raycache._train.console import epoch_text, quiet_ray_train, say_progress
from raycache._train.diverged import check_finite
from raycache._train.epoch import (
    FINITE,
    SAVE_NOW,
    SLOTS,
    TRAIN_LOSS,
    epoch_metrics,
    epoch_seed,
    evaluate,
    train_epoch,
)
from raycache._train.input_stats import fit_inputs
from raycache._train.metrics_log import write_artifacts
from raycache._train.runspec import RunSpec
from raycache._train.state import restore, save
from raycache._train.worker_heads import WorkerHeads

__all__ = ["quiet_ray_train", "train_loop"]


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """Train the head (or a sweep's heads) on this worker's share; returns the history, where
    it resumed, and a sweep's per-member records."""
    spec: RunSpec = config["spec"]
    quiet_ray_train()
    rank, device = 0, torch.device("cuda" if spec.use_gpu else "cpu")
    if spec.num_workers:  # on a Ray Train worker (in-process, Ray Train is never imported)
        import ray.train.torch

        rank, device = ray.train.get_context().get_world_rank(), ray.train.torch.get_device()
    train_data, val_data = data_sources(spec, rank, device)
    team = build_team(spec, device, len(train_data) or None)
    restore(team)
    if not team.run.epoch:  # a resumed run's heads hold their standardisation already
        fit_inputs(team, train_data)
    wrap(team)
    epochs, last_save, started = spec.recipe.loop.epochs, time.monotonic(), time.monotonic()
    first = team.run.epoch
    if spec.recipe.optim.solver == "lbfgs" and not team.run.epoch:  # one epoch: the solve
        from raycache._train.solved import solve_head

        rows, extras, seconds = solve_head(team, train_data, val_data)
        record(team, 0, rows, extras, seconds, time.monotonic() - started)
        if rank == 0 and spec.progress:
            say_progress(progress_line(team, seconds), final=True)
        save(team, rank)
    while team.run.epoch < epochs and not team.run.stopped:
        epoch, t0 = team.run.epoch, time.perf_counter()
        torch.manual_seed(epoch_seed(spec, epoch, rank))
        sums = torch.zeros(len(team.members), SLOTS, dtype=torch.float64, device=device)
        then = epoch_seed(spec, epoch + 1, rank) if epoch + 1 < epochs else None
        steps_before = team.members[0].schedule.step_no
        train_epoch(team, train_data, epoch_seed(spec, epoch, rank), sums, then)
        evaluators = evaluate(team, val_data, sums)
        if team.stack is not None:
            team.stack.pull()  # each member's head, for its best weights and checkpoint
        due = spec.checkpoint_seconds and time.monotonic() - last_save >= spec.checkpoint_seconds
        sums[0, SAVE_NOW] = float(rank == 0 and bool(due))
        local = sums[:, [TRAIN_LOSS, FINITE]].cpu()  # this worker's, for where it diverged
        # collectives, on every worker, in the same order
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
        total = sums.tolist()
        check_finite(team, epoch, total, local, steps_before, rank)
        extras = (evaluators[0].compute_each() if team.stack is not None
                  else [e.compute() for e in evaluators])
        record(team, epoch, total, extras, time.perf_counter() - t0,
               time.monotonic() - started)
        every = spec.checkpoint_every
        end = team.run.epoch == epochs or team.run.stopped
        if rank == 0 and spec.progress:
            say_progress(progress_line(team, (time.monotonic() - started)
                                       / (team.run.epoch - first)), final=end)
        if end or sums[0, SAVE_NOW] > 0 or (every and team.run.epoch % every == 0):
            save(team, rank)
            last_save = time.monotonic()
    out = {"history": team.run.history, "resumed_from": team.run.resumed_from}
    if rank == 0:
        write_artifacts(spec.store, spec.run_dir, team.run.history)
    if spec.sweep and team.run.history:
        out["sweep"] = sweep_rows(team)
    return out


def record(team: WorkerHeads, epoch: int, rows: list[list[float]], extras: list[dict[str, float]],
           seconds: float, wall: float) -> None:
    """Each head still training: the epoch's metrics into its history, its best epoch and
    early stopping; a sweep: its leader and run-level progress."""
    latest = []
    for parts, progress, row, extra in zip(team.members, team.progress, rows, extras,
                                           strict=True):
        metrics = epoch_metrics(parts, row, epoch, seconds, extra)
        metrics["wall_s"] = wall  # since this worker's loop began
        latest.append(metrics)
        if not progress.stopped:
            progress.epoch = epoch + 1
            progress.history.append(metrics)
            track_best(parts, progress, metrics)
    if team.spec.sweep:
        end_sweep_epoch(team, latest)


def progress_line(team: WorkerHeads, pace: float) -> str:
    """The epoch's line (raycache._train.console): its metrics, the monitored one included, or
    a sweep's leader by name; and the time left at `pace` seconds an epoch."""
    spec, epochs = team.spec, team.spec.recipe.loop.epochs
    sweep = [m.settings_dict() for m in spec.sweep]
    return epoch_text(team.run.history[-1], epochs, spec.recipe.evaluation.monitor,
                      pace * (epochs - team.run.epoch), sweep, spec.select)
