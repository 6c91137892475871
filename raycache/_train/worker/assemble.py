"""Assembly on a worker: its data, each head's model, optimizer, schedule and objective, the
sweep's Stack, then DDP and torch.compile around them."""

from __future__ import annotations

import math
from typing import Any

import torch

from raycache._heads.joint import build_model, param_groups
from raycache._train.console import say
from raycache._train.data.in_memory import InMemory
from raycache._train.data.streamed import Streamed, beside_readers
from raycache._train.objectives import OBJECTIVES
from raycache._train.optim import Schedule, build_optimizer
from raycache._train.runspec import WorkerSpec
from raycache._train.sweep.members import Members
from raycache._train.sweep.stack import Stack, stackable
from raycache._train.worker.heads import Kit, Progress, Trained, WorkerHeads

__all__ = ["build_heads", "build_kit", "compile_or_eager", "data_sources", "fused_for",
           "steps_per_epoch", "wrap"]


def data_sources(spec: WorkerSpec, rank: int, device: torch.device) -> tuple[Any, Any]:
    """(train, validation) data of this worker, in the spec's placement."""
    if spec.overlap_feed:  # the fill is still under way: epoch 1 reads its shards as they land
        from raycache._train.data.overlap import overlap_sources

        return overlap_sources(spec, rank, device, data_sources)
    custom = OBJECTIVES[spec.recipe.objective].data_sources
    if custom is not None:
        return custom(spec, rank, device)
    if spec.placement == "stream":
        beside_readers()
        return Streamed.for_worker(spec, rank, device)
    if spec.placement == "gpu" and device.type != "cuda":
        raise RuntimeError("placement 'gpu' needs use_gpu: true and a CUDA device")
    return InMemory.for_worker(spec, rank, device if spec.placement == "gpu" else
                               torch.device("cpu"))


def steps_per_epoch(spec: WorkerSpec, train_rows: int | None) -> int:
    held_out = spec.recipe.evaluation.val_fraction
    rows = train_rows if train_rows else spec.rows * (1 - held_out) / spec.world
    return max(math.ceil(rows / spec.recipe.loop.batch_size / spec.recipe.optim.grad_accum), 1)


def build_kit(spec: WorkerSpec, device: torch.device, train_rows: int | None,
                fused: bool = False) -> Kit:
    """One head's kit (`fused`: its optimizer's fused implementation, for a sweep's many
    small heads and on a GPU, where the per-tensor one costs a kernel launch per tensor op)."""
    r = spec.recipe
    base = build_model(spec.head).to(device)
    objective = OBJECTIVES[r.objective].build(spec, device)
    learnable = list(objective.criterion.parameters())
    opt = build_optimizer(param_groups(base, learnable, r), r, fused=fused)
    if r.optim.precision == "float16" and device.type != "cuda":
        raise RuntimeError(f"precision='float16' needs a CUDA device, but this worker has "
                           f"{device.type}; use precision: bfloat16 on CPU")
    model = Trained(base, objective.criterion) if learnable else base
    return Kit(spec, base, model, opt, Schedule(opt, r, steps_per_epoch(spec, train_rows)),
                 torch.amp.GradScaler(device.type, enabled=r.optim.precision == "float16"),
                 objective, device)


def fused_for(spec: WorkerSpec, device: torch.device) -> bool:
    """Whether the heads step with their optimizer's fused implementation: a sweep's many small
    heads, and any head on a GPU, where each kernel launch of the per-tensor implementation
    costs more than a small head's arithmetic."""
    return bool(spec.sweep) or device.type == "cuda"


def build_heads(spec: WorkerSpec, device: torch.device, train_rows: int | None) -> WorkerHeads:
    """Each head's kit, seeded alike: a sweep's member starts from the weights a lone run of
    its settings would start from."""
    members = []
    for member in spec.members():
        torch.manual_seed(spec.recipe.loop.seed)
        members.append(build_kit(member, device, train_rows, fused=fused_for(spec, device)))
    progress = [Progress() for _ in members]
    run = progress[0] if not spec.sweep else Progress()
    heads = WorkerHeads(spec, members, progress, run)
    learnable = any(list(p.objective.criterion.parameters()) for p in members)
    recipes = [p.spec.recipe for p in members]
    if spec.sweep and stackable([p.base for p in members], recipes, learnable):
        heads.stack = Stack([p.base for p in members], recipes, spec.class_weights)
        for kit, view in zip(members, heads.stack.members, strict=True):
            kit.opt = view  # the member's slice of the stack's optimizer
            kit.schedule = Schedule(view, kit.spec.recipe, kit.schedule.spe)
    return heads


def wrap(heads: WorkerHeads) -> None:
    """DDP across workers (after the weights are restored), then torch.compile if asked: each
    head alone, or a sweep's heads as one module (so one DDP all-reduces all of them)."""
    spec = heads.spec
    if not spec.sweep:
        kit = heads.members[0]
        if spec.world > 1:  # a pre-trained encoder may hold parameters the model never uses
            import ray.train.torch

            unused = {"find_unused_parameters": True} if spec.head.trainable else None
            kit.model = ray.train.torch.prepare_model(kit.model, move_to_device=False,
                                                        parallel_strategy_kwargs=unused)
        if spec.recipe.loop.compile and spec.head.trainable:
            say("compile: true compiles a head on cached features; with trainable encoders "
                "the model trains in eager mode")
        elif spec.recipe.loop.compile:
            kit.model = compile_or_eager(kit.model, spec.head.in_dim, kit.device)
        return
    if heads.stack is not None:
        heads.stack.push()  # the members' (maybe restored) weights
    heads.base = heads.model = (heads.stack.module if heads.stack is not None
                               else Members([p.model for p in heads.members]))
    if spec.world > 1:
        import ray.train.torch

        heads.model = ray.train.torch.prepare_model(heads.model, move_to_device=False)
    if spec.recipe.loop.compile:
        heads.model = compile_or_eager(heads.model, spec.head.in_dim, heads.members[0].device)


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
