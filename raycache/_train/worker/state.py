"""The heads' training state in and out of checkpoints: what state.pt holds, restoring it on a
worker, and saving it (with the head to keep) through Ray Train or into the run folder."""

from __future__ import annotations

import tempfile
from typing import Any

from raycache._train.folder import checkpoints as ckpt
from raycache._train.folder.metrics import write_metrics, write_sweep
from raycache._train.worker.best_epoch import saved_epoch, serves_best, sweep_rows
from raycache._train.worker.heads import Kit, Progress, WorkerHeads

__all__ = ["KEEP_CHECKPOINTS", "load_member", "member_state", "restore", "save"]

KEEP_CHECKPOINTS = 2


def member_state(kit: Kit, progress: Progress) -> dict[str, Any]:
    """One head's whole training state (what state.pt holds for it)."""
    return {
        "model": kit.base.state_dict(), "criterion": kit.objective.criterion.state_dict(),
        "optimizer": kit.opt.state_dict(),
        "schedule": kit.schedule.state_dict(), "scaler": kit.scaler.state_dict(),
        "best_weights": kit.best_weights, "progress": vars(progress),
    }


def load_member(kit: Kit, state: dict[str, Any]) -> Progress:
    """One head's training state back into its kit; its progress."""
    kit.base.load_state_dict(state["model"])
    if "criterion" in state:
        kit.objective.criterion.load_state_dict(state["criterion"])
    kit.opt.load_state_dict(state["optimizer"])
    kit.schedule.load_state_dict(state["schedule"])
    kit.scaler.load_state_dict(state["scaler"])
    kit.best_weights = state["best_weights"]
    return Progress(**state["progress"])


def restore(heads: WorkerHeads) -> None:
    """Load the latest checkpoint of this run: Ray Train's (after a worker restart, or a driver
    restart under DDP), else the newest complete one in the run folder (in-process)."""
    given = None
    if heads.spec.num_workers:
        import ray.train

        given = ray.train.get_checkpoint()
    state = None
    if given is not None:
        with given.as_directory() as d, open(f"{d}/{ckpt.STATE}", "rb") as f:
            state = ckpt.load_state(f, f"{given.path}/{ckpt.STATE}")
    else:
        path = ckpt.latest(heads.spec.store, heads.spec.run_dir)
        if path is not None:
            state = ckpt.read_state(heads.spec.store, path)
    if state is None:
        return
    if heads.spec.sweep:
        heads.progress = [load_member(p, s)
                         for p, s in zip(heads.members, state["members"], strict=True)]
        heads.run = Progress(**state["progress"])
        heads.leader = state["leader"]
    else:
        heads.run = load_member(heads.members[0], state)
        heads.progress = [heads.run]
    ckpt.set_rng_state(state["rng"])
    heads.run.resumed_from.append(heads.run.epoch)


def save(heads: WorkerHeads, rank: int) -> None:
    """Report to Ray Train with the whole state attached by rank 0 (in-process: write it to
    the run folder here). The head saved is the one head's, or a sweep's leader's."""
    spec, progress = heads.spec, heads.run
    metrics = progress.history[-1]
    name = ckpt.checkpoint_name(progress.epoch)
    if rank != 0:
        import ray.train

        ray.train.report(metrics, checkpoint_dir_name=name)
        return
    states = [member_state(p, g) for p, g in zip(heads.members, heads.progress, strict=True)]
    if spec.sweep:
        state = {"members": states, "leader": heads.leader, "progress": vars(progress)}
    else:
        state = states[0]
    state["rng"] = ckpt.rng_state()
    lead = heads.members[heads.leader]
    use_best = serves_best(lead)
    head_weights = lead.best_weights if use_best else lead.base.state_dict()
    key = spec.select if spec.sweep else spec.recipe.evaluation.monitor
    served = saved_epoch(lead, heads.progress[heads.leader])["epoch"]
    info = {"metrics": metrics, "best": {key: progress.best, "epoch": progress.best_epoch},
            "weights": "best" if use_best else "last", "weights_epoch": served,
            "history": progress.history,
            "key": spec.key}  # the cache's key column: what predict keeps by default
    rows = sweep_rows(heads) if spec.sweep else []
    if rows:
        info["sweep"] = [{k: v for k, v in row.items() if k != "history"} for row in rows]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt.write_folder(tmp, lead.spec.head, head_weights, state, info)
        if spec.num_workers == 0:
            ckpt.upload(spec.store, tmp, f"{spec.run_dir}/{name}")
            ckpt.prune(spec.store, spec.run_dir, KEEP_CHECKPOINTS)
        else:
            import ray.train

            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                             checkpoint_dir_name=name)
    write_metrics(spec.store, spec.run_dir, progress.history)
    if rows:
        write_sweep(spec.store, spec.run_dir, rows)
