"""The per-worker training loop that Ray Train runs (in the driver in local mode, else on each
DDP worker): set up, resume, then epochs of steps; metrics all-reduced, logged by rank 0, and
reported to Ray Train only with a checkpoint. The objective (raycache.train.objectives) supplies the
loss, what counts as a hit, and the validation metrics. A sweep's heads (a Team) train on the
same batches in the same pass, each with its own optimizer, schedule and early stopping; a
sweep of plain linear classifiers trains as one Stack (one product, loss and step for all)."""

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

from raycache.heads.joint import build_model, param_groups
from raycache.train import checkpoint as ckpt
from raycache.train.data.shares import InMemory, Streamed
from raycache.train.metrics_log import epoch_line, write_artifacts, write_metrics, write_sweep
from raycache.train.objectives import OBJECTIVES, Evaluator, Objective
from raycache.train.objectives.gather import lockstep
from raycache.train.optim import Schedule, build_optimizer
from raycache.train.runspec import RunSpec
from raycache.train.sweep.members import Members
from raycache.train.sweep.stack import Stack, stackable

__all__ = ["Parts", "Progress", "Team", "train_loop"]

KEEP_CHECKPOINTS = 2
# Slots of the per-epoch sums all-reduced across workers (one row of them per head).
TRAIN_LOSS, TRAIN_HIT, TRAIN_N, VAL_LOSS, VAL_HIT, VAL_N, SAVE_NOW = range(7)
SLOTS = 7


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
    """The head itself, or the Joint of the trainable encoders and the head (raycache.heads.joint);
    its state_dict is what gets saved."""
    model: torch.nn.Module
    """What the step calls: the head (with the loss's learnable parts, when it has any), maybe
    DDP-wrapped and compiled."""
    opt: torch.optim.Optimizer
    schedule: Schedule
    scaler: torch.amp.GradScaler
    objective: Objective
    device: torch.device
    best_weights: dict[str, torch.Tensor] | None = None


@dataclass
class Team:
    """Every head the run trains (one, or a sweep's members) on the same batches: each one's
    parts and progress, the run's own progress, and, for a sweep, the module that runs all its
    heads in one call."""

    spec: RunSpec
    members: list[Parts]
    progress: list[Progress]
    run: Progress
    """The one head's progress; a sweep's: its epochs and its leading member's metrics."""
    heads: Members | None = None
    """A sweep's heads as one module; None for a single head (its parts.model runs it)."""
    model: Any = None
    """What a sweep's training step calls: `heads`, maybe DDP-wrapped and compiled."""
    leader: int = 0
    """The member best by the run's select metric so far."""
    stack: Stack | None = None
    """A stackable sweep's heads as one (then `heads` is its module); None otherwise."""

    @classmethod
    def of(cls, parts: Parts) -> Team:
        progress = Progress()
        return cls(parts.spec, [parts], [progress], progress)

    def runner(self) -> Any:
        """The module the training step calls."""
        return self.members[0].model if self.heads is None else self.model

    def forward(self, x: torch.Tensor, training: bool) -> Any:
        """Every head's output for the batch x: a tuple, or a Stack's [B, M, out] tensor."""
        if self.heads is None:
            p = self.members[0]
            return ((p.model if training else p.base)(x),)
        return (self.model if training else self.heads)(x)


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
    if spec.landing:  # the fill is still under way: epoch 1 reads its shards as they land
        from raycache.train.data.landing import first_pass

        return first_pass(spec, rank, device, holders)
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


def build_parts(spec: RunSpec, device: torch.device, train_rows: int | None,
                fused: bool = False) -> Parts:
    """One head's parts (`fused`: its optimizer's fused implementation, for a sweep)."""
    r = spec.recipe
    base = build_model(spec.head).to(device)
    objective = OBJECTIVES[r.objective].build(spec, device)
    learnable = list(objective.criterion.parameters())
    opt = build_optimizer(param_groups(base, learnable, r), r, fused=fused)
    if r.precision == "float16" and device.type != "cuda":
        raise RuntimeError(f"precision='float16' needs a CUDA device, but this worker has "
                           f"{device.type}; use precision: bfloat16 on CPU")
    model = Trained(base, objective.criterion) if learnable else base
    return Parts(spec, base, model, opt, Schedule(opt, r, steps_per_epoch(spec, train_rows)),
                 torch.amp.GradScaler(device.type, enabled=r.precision == "float16"),
                 objective, device)


def build_team(spec: RunSpec, device: torch.device, train_rows: int | None) -> Team:
    """Each head's parts, seeded alike: a sweep's member starts from the weights a lone run of
    its settings would start from."""
    members = []
    for member in spec.members():
        torch.manual_seed(spec.recipe.seed)
        members.append(build_parts(member, device, train_rows, fused=bool(spec.sweep)))
    progress = [Progress() for _ in members]
    run = progress[0] if not spec.sweep else Progress()
    team = Team(spec, members, progress, run)
    learnable = any(list(p.objective.criterion.parameters()) for p in members)
    recipes = [p.spec.recipe for p in members]
    if spec.sweep and stackable([p.base for p in members], recipes, learnable):
        team.stack = Stack([p.base for p in members], recipes, spec.class_weights)
        for parts, view in zip(members, team.stack.opt.members, strict=True):
            parts.opt = view  # the member's slice of the stack's optimizer
            parts.schedule = Schedule(view, parts.spec.recipe, parts.schedule.spe)
    return team


def member_state(parts: Parts, progress: Progress) -> dict[str, Any]:
    """One head's whole training state (what state.pt holds for it)."""
    return {
        "model": parts.base.state_dict(), "criterion": parts.objective.criterion.state_dict(),
        "optimizer": parts.opt.state_dict(),
        "schedule": parts.schedule.state_dict(), "scaler": parts.scaler.state_dict(),
        "best_weights": parts.best_weights, "progress": vars(progress),
    }


def load_member(parts: Parts, state: dict[str, Any]) -> Progress:
    parts.base.load_state_dict(state["model"])
    if "criterion" in state:
        parts.objective.criterion.load_state_dict(state["criterion"])
    parts.opt.load_state_dict(state["optimizer"])
    parts.schedule.load_state_dict(state["schedule"])
    parts.scaler.load_state_dict(state["scaler"])
    parts.best_weights = state["best_weights"]
    return Progress(**state["progress"])


def restore(team: Team) -> None:
    """Load the latest checkpoint of this run: Ray Train's (after a worker restart, or a driver
    restart under DDP), else the newest complete one in the run folder (local mode)."""
    given = ray.train.get_checkpoint()
    state = None
    if given is not None:
        with given.as_directory() as d, open(f"{d}/{ckpt.STATE}", "rb") as f:
            state = torch.load(f, map_location="cpu", weights_only=False)
    else:
        path = ckpt.latest(team.spec.store, team.spec.run_dir)
        if path is not None:
            state = ckpt.read_state(team.spec.store, path)
    if state is None:
        return
    if team.spec.sweep:
        team.progress = [load_member(p, s)
                         for p, s in zip(team.members, state["members"], strict=True)]
        team.run = Progress(**state["progress"])
        team.leader = state["leader"]
    else:
        team.run = load_member(team.members[0], state)
        team.progress = [team.run]
    ckpt.set_rng_state(state["rng"])
    team.run.resumed_from.append(team.run.epoch)


def wrap(team: Team) -> None:
    """DDP across workers (after the weights are restored), then torch.compile if asked: each
    head alone, or a sweep's heads as one module (so one DDP all-reduces all of them)."""
    spec = team.spec
    if not spec.sweep:
        parts = team.members[0]
        if spec.world > 1:  # a pre-trained encoder may hold parameters the model never uses
            unused = {"find_unused_parameters": True} if spec.head.trainable else None
            parts.model = ray.train.torch.prepare_model(parts.model, move_to_device=False,
                                                        parallel_strategy_kwargs=unused)
        if spec.recipe.compile and spec.head.trainable:
            say("compile: true compiles a head on cached features; with trainable encoders "
                "the model trains in eager mode")
        elif spec.recipe.compile:
            parts.model = compile_or_eager(parts.model, spec.head.in_dim, parts.device)
        return
    if team.stack is not None:
        team.stack.push()  # the members' (maybe restored) weights
    team.heads = team.model = (team.stack.module if team.stack is not None
                               else Members([p.model for p in team.members]))
    if spec.world > 1:
        team.model = ray.train.torch.prepare_model(team.model, move_to_device=False)
    if spec.recipe.compile:
        team.model = compile_or_eager(team.model, spec.head.in_dim, team.members[0].device)


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


def train_epoch(parts: Parts | Team, data: Any, seed: int, sums: torch.Tensor,
                then: int | None = None) -> None:
    """One pass over the training share: micro-batches, accumulation, clipping, stepping
    (`then`: the next epoch's seed, so a streamed share can read ahead for it). Every head of a
    team sees every batch; `sums` holds one row of slots per head."""
    team = parts if isinstance(parts, Team) else Team.of(parts)
    lead, sums = team.members[0], sums.view(-1, SLOTS)
    r, model = lead.spec.recipe, team.runner()
    model.train()
    accum = r.grad_accum
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    join = model.join() if ddp else contextlib.nullcontext()
    micro = 0
    batches = data.batches(r.batch_size, seed=seed, then=then)
    if any(p.objective.gathers for p in team.members):
        batches = lockstep(batches, lead.device)  # every worker at every gathering step
    with join:
        for x, y in batches:
            x, y = x.to(lead.device, non_blocking=True), y.to(lead.device, non_blocking=True)
            micro += 1
            last = micro % accum == 0
            sync = contextlib.nullcontext() if (last or not ddp) else model.no_sync()
            with sync:
                with autocast(lead):
                    outs = team.forward(x, training=True)
                total, values, hits = losses(team, outs, y)
                lead.scaler.scale(total / accum).backward()
            sums[:, TRAIN_LOSS] += values.double() * len(y)
            sums[:, TRAIN_HIT] += hits
            sums[:, TRAIN_N] += len(y)
            if last:
                step(team)
    if micro % accum:
        step(team)  # the epoch's last, partial accumulation


def losses(team: Team, outs: Any, y: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(what to back-propagate, each head's loss [M], each head's hits [M]) of a batch."""
    if team.stack is not None:
        return team.stack.losses(outs.float(), y)
    total, values, hits = None, [], []
    for p, out in zip(team.members, outs, strict=True):
        loss, value = p.objective.loss(out.float(), y)
        total = loss if total is None else total + loss
        values.append(value)
        hits.append(p.objective.hits(out.detach().float(), y))
    return total, torch.stack(values), torch.stack(hits)


def step(team: Team) -> None:
    """An optimizer step of every head still training (a stopped head's gradients dropped)."""
    lead = team.members[0]
    if team.stack is not None:  # one step for every member: a stopped one's is a no-op
        active = [not p.stopped for p in team.progress]
        team.stack.step(active)
        for parts, on in zip(team.members, active, strict=True):
            if on:
                parts.schedule.step_batch()
    else:
        step_each(team)
    lead.scaler.update()
    every = lead.spec.recipe.empty_cache_every
    if every and lead.device.type == "cuda" and lead.schedule.step_no % every == 0:
        torch.cuda.empty_cache()


def step_each(team: Team) -> None:
    """Each head's own optimizer step, one after another."""
    lead = team.members[0]
    for parts, progress in zip(team.members, team.progress, strict=True):
        if progress.stopped:
            parts.opt.zero_grad(set_to_none=True)
            continue
        r = parts.spec.recipe
        if r.grad_clip > 0:
            lead.scaler.unscale_(parts.opt)
            params = [p for group in parts.opt.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, r.grad_clip)
        lead.scaler.step(parts.opt)
        parts.opt.zero_grad(set_to_none=True)
        parts.schedule.step_batch()


def evaluate(parts: Parts | Team, data: Any,
             sums: torch.Tensor) -> Evaluator | list[Evaluator]:
    """Validation loss and hits into `sums`; the objective's metrics fed (computed later, when
    every worker is done, since computing them is a collective). A team: one Evaluator per
    head (a Stack: one for all its heads, whose compute_each gives each head's), and one row
    of `sums` each."""
    team = parts if isinstance(parts, Team) else Team.of(parts)
    lead, rows = team.members[0], sums.view(-1, SLOTS)
    team.runner().eval()
    metrics = ([lead.objective.evaluator(members=len(team.members))]
               if team.stack is not None else [p.objective.evaluator() for p in team.members])
    with torch.inference_mode():
        for x, y in data.batches(lead.spec.recipe.batch_size * 4, seed=None):
            x, y = x.to(lead.device, non_blocking=True), y.to(lead.device, non_blocking=True)
            with autocast(lead):
                outs = team.forward(x, training=False)
            if team.stack is not None:
                outs = outs.float()
                loss, hits = team.stack.eval_losses(outs, y), team.stack.hits(outs, y)
                metrics[0].update(outs, y)
            else:
                values, counts = [], []
                for p, out, evaluator in zip(team.members, outs, metrics, strict=True):
                    out = out.float()
                    values.append(p.objective.eval_loss(out, y))
                    counts.append(p.objective.hits(out, y))
                    evaluator.update(out, y)
                loss, hits = torch.stack(values), torch.stack(counts)
            rows[:, VAL_LOSS] += loss.double() * len(y)
            rows[:, VAL_HIT] += hits
            rows[:, VAL_N] += len(y)
    return metrics if isinstance(parts, Team) else metrics[0]


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


def saved_epoch(parts: Parts, progress: Progress) -> dict[str, Any]:
    """The metrics of the epoch whose weights a head saves: its best (early stopping), else
    its last."""
    use_best = parts.spec.recipe.early_stopping and parts.best_weights is not None
    epoch = progress.best_epoch if use_best else progress.history[-1]["epoch"]
    return next(m for m in progress.history if m["epoch"] == epoch)


def score(team: Team, i: int) -> float:
    """Member i's value of the select metric, at the epoch whose weights it saves."""
    spec, metrics = team.spec, saved_epoch(team.members[i], team.progress[i])
    if spec.select not in metrics:
        raise RuntimeError(f"select={spec.select!r} is not a metric; expected one of "
                           f"{sorted(k for k in metrics if k != 'placement')}")
    return metrics[spec.select]


def end_sweep_epoch(team: Team, latest: list[dict[str, Any]]) -> None:
    """A sweep's run-level progress after an epoch: the leader by the select metric, whose
    metrics this epoch are the run's; stopped when every member has stopped."""
    spec, run = team.spec, team.run
    scores = [score(team, i) for i in range(len(team.members))]
    pick = max if spec.select_mode == "max" else min
    team.leader = scores.index(pick(scores))
    lead = saved_epoch(team.members[team.leader], team.progress[team.leader])
    run.epoch += 1
    run.history.append({**latest[team.leader], "member": team.leader,
                        "active": sum(not p.stopped for p in team.progress)})
    run.best, run.best_epoch = scores[team.leader], lead["epoch"]
    run.stopped = all(p.stopped for p in team.progress)


def sweep_rows(team: Team) -> list[dict[str, Any]]:
    """One record per member: its settings, score, best epoch, last metrics and history."""
    out = []
    for i, (m, progress) in enumerate(zip(team.spec.sweep, team.progress, strict=True)):
        out.append({
            "member": i, "settings": m.settings_dict(), team.spec.select: score(team, i),
            "epoch": saved_epoch(team.members[i], progress)["epoch"],
            "selected": i == team.leader, "stopped": progress.stopped,
            "epochs": len(progress.history),
            "metrics": {k: v for k, v in progress.history[-1].items() if k != "placement"},
            "history": progress.history})
    return out


def save(team: Team, rank: int) -> None:
    """Report to Ray Train with the whole state attached by rank 0 (local mode: write it to
    the run folder here, since local mode keeps checkpoints in memory only). The head saved
    is the one head's, or a sweep's leader's."""
    spec, progress = team.spec, team.run
    metrics = progress.history[-1]
    name = ckpt.checkpoint_name(progress.epoch)
    if rank != 0:
        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    states = [member_state(p, g) for p, g in zip(team.members, team.progress, strict=True)]
    if spec.sweep:
        state = {"members": states, "leader": team.leader, "progress": vars(progress)}
    else:
        state = states[0]
    state["rng"] = ckpt.rng_state()
    lead = team.members[team.leader]
    use_best = lead.spec.recipe.early_stopping and lead.best_weights is not None
    head_weights = lead.best_weights if use_best else lead.base.state_dict()
    key = spec.select if spec.sweep else spec.recipe.monitor
    info = {"metrics": metrics, "best": {key: progress.best, "epoch": progress.best_epoch},
            "weights": "best" if use_best else "last", "history": progress.history,
            "key": spec.key}  # the cache's key column: what predict keeps by default
    rows = sweep_rows(team) if spec.sweep else []
    if rows:
        info["sweep"] = [{k: v for k, v in row.items() if k != "history"} for row in rows]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt.write_folder(tmp, lead.spec.head, head_weights, state, info)
        if spec.num_workers == 0:
            ckpt.upload(spec.store, tmp, f"{spec.run_dir}/{name}")
            ckpt.prune(spec.store, spec.run_dir, KEEP_CHECKPOINTS)
            ray.train.report(metrics)
        else:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                             checkpoint_dir_name=name)
    write_metrics(spec.store, spec.run_dir, progress.history)
    if rows:
        write_sweep(spec.store, spec.run_dir, rows)


def quiet_ray_train() -> None:
    """No INFO dumps per report ("Reporting training result ...", "Reported metrics ...")."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)


def say(line: str) -> None:
    """One line to stdout, once: Ray Train's worker print() goes both to stdout and to a
    logger, which showed every epoch twice."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """Train the head (or a sweep's heads) on this worker's share; returns the history, where
    it resumed, and a sweep's per-member records."""
    spec: RunSpec = config["spec"]
    quiet_ray_train()
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    device = (ray.train.torch.get_device() if spec.num_workers else
              torch.device("cuda" if spec.use_gpu else "cpu"))
    train_data, val_data = holders(spec, rank, device)
    team = build_team(spec, device, len(train_data) or None)
    restore(team)
    wrap(team)
    r, last_save, started = spec.recipe, time.monotonic(), time.monotonic()
    first, heads = team.run.epoch, len(team.members)
    while team.run.epoch < r.epochs and not team.run.stopped:
        epoch, t0 = team.run.epoch, time.perf_counter()
        torch.manual_seed(epoch_seed(spec, epoch, rank))
        sums = torch.zeros(heads, SLOTS, dtype=torch.float64, device=device)
        then = epoch_seed(spec, epoch + 1, rank) if epoch + 1 < r.epochs else None
        train_epoch(team, train_data, epoch_seed(spec, epoch, rank), sums, then)
        evaluators = evaluate(team, val_data, sums)
        if team.stack is not None:
            team.stack.pull()  # each member's head, for its best weights and checkpoint
        # collectives, on every worker
        extras = (evaluators[0].compute_each() if team.stack is not None
                  else [e.compute() for e in evaluators])
        due = spec.checkpoint_seconds and time.monotonic() - last_save >= spec.checkpoint_seconds
        sums[0, SAVE_NOW] = float(rank == 0 and bool(due))
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(sums)
        seconds, latest = time.perf_counter() - t0, []
        for parts, progress, row, extra in zip(team.members, team.progress, sums.tolist(),
                                               extras, strict=True):
            metrics = epoch_metrics(parts, row, epoch, seconds, extra)
            metrics["wall_s"] = time.monotonic() - started  # since this worker's loop began
            latest.append(metrics)
            if not progress.stopped:
                progress.epoch = epoch + 1
                progress.history.append(metrics)
                track_best(parts, progress, metrics)
        if spec.sweep:
            end_sweep_epoch(team, latest)
        if rank == 0 and spec.progress:
            pace = (time.monotonic() - started) / (team.run.epoch - first)
            now = team.run.history[-1]
            line = epoch_line(now, r.epochs, pace * (r.epochs - team.run.epoch))
            if spec.sweep:
                line += f"  sweep: best #{team.leader} of {heads}, {now['active']} training"
            say(line)
        every = spec.checkpoint_every
        end = team.run.epoch == r.epochs or team.run.stopped
        if end or sums[0, SAVE_NOW] > 0 or (every and team.run.epoch % every == 0):
            save(team, rank)
            last_save = time.monotonic()
    out = {"history": team.run.history, "resumed_from": team.run.resumed_from}
    if rank == 0:
        write_artifacts(spec.store, spec.run_dir, team.run.history)
    if spec.sweep and team.run.history:
        out["sweep"] = sweep_rows(team)
    return out
