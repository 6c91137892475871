"""Where a run trains, decided from what is there: how many DDP workers (0: this process), and
where each keeps its share of the rows."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from raycache._compute import where
from raycache._train.config import TrainConfig

if TYPE_CHECKING:
    from raycache._heads.specs import HeadSpec

__all__ = ["AUTO_LOCAL_BYTES", "cluster", "resolve_placement", "resolve_workers"]

AUTO_LOCAL_BYTES = 512 * 2**20
"""num_workers: auto with use_gpu trains in-process below this many feature bytes."""


def resolve_workers(cfg: TrainConfig, head: HeadSpec, rows: int) -> tuple[int, str]:
    """How many DDP workers (0: in this process), and why, in words. auto trains here unless
    DDP is faster: a cluster of several nodes (one CPU worker per node), or GPUs (use_gpu: one
    worker per GPU, for a cache over AUTO_LOCAL_BYTES of features). On one node, DDP's workers
    would share its cores and memory after seconds of start-up: a share too large for memory is
    streamed here instead (see resolve_placement)."""
    if cfg.resources.num_workers != "auto":
        workers = int(cfg.resources.num_workers)
        return workers, f"resources.num_workers: {workers}"
    size = rows * (head.in_dim * 4 + 8)
    features = f"{size / 2**30:.2f} GiB of features"
    if cfg.resources.use_gpu:
        if size < AUTO_LOCAL_BYTES:
            return 0, f"on this machine's GPU: {features}"
        gpus = max(int(cluster(cfg).cluster_resources().get("GPU", 1)), 1)
        return gpus, f"one worker per GPU: {features}"
    found = where.look()
    if found is not None and not found.nodes:  # a cluster that cannot be asked: as before
        return (0, features) if size < AUTO_LOCAL_BYTES else \
            (2, f"{features} on the cluster at {found.address}")
    nodes = [n for n in (found.nodes if found else ()) if n.get("CPU", 0) > 0]
    if len(nodes) > 1:
        return len(nodes), f"one per node of {found.describe()}"
    cpus = nodes[0]["CPU"] if nodes else os.cpu_count() or 1
    fits = "fit" if size < _memory() / 4 else "are streamed: they do not fit"
    return 0, f"one node with {cpus:g} CPUs; {features} {fits} in memory"


def _memory() -> int:
    import psutil

    return psutil.virtual_memory().total


def resolve_placement(cfg: TrainConfig, head: HeadSpec, rows: int, workers: int) -> str:
    """auto: in memory (gpu with use_gpu, else cpu) when each worker's share takes under a
    quarter of its memory (the smallest node's, split between the workers); else stream."""
    if cfg.resources.placement != "auto":
        return cfg.resources.placement
    if workers == 0:  # local mode: this process's machine
        world, memory = 1, _memory()
    else:
        world = workers
        memory = min(n["Resources"].get("memory", 0)
                     for n in cluster(cfg).nodes() if n.get("Alive"))
    if rows * (head.in_dim * 4 + 8) / world < memory / 4 / world:
        return "gpu" if cfg.resources.use_gpu else "cpu"
    return "stream"


def cluster(cfg: TrainConfig) -> Any:
    """Ray, connected: only the DDP path and its auto choices need a cluster."""
    import ray

    from raycache._compute.cluster import connect

    connect(cfg.progress)
    return ray
