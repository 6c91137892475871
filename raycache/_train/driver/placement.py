"""Where a run trains, decided from what is there: how many DDP workers (0: this process), and
where each holds its part of the rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raycache._compute.workers import AUTO_LOCAL_BYTES, Room, decide, feature_bytes, fits, memory
from raycache._train.config import TrainConfig

if TYPE_CHECKING:
    from raycache._heads.specs import HeadSpec

__all__ = ["AUTO_LOCAL_BYTES", "cluster", "resolve_placement", "resolve_workers"]


def resolve_workers(cfg: TrainConfig, head: HeadSpec, rows: int) -> tuple[int, str]:
    """How many DDP workers (0: in this process), and why, in words. auto trains here unless
    DDP is faster: GPUs (use_gpu: one worker per GPU, for a cache over AUTO_LOCAL_BYTES of
    features), else the decision of how many the probe shares (raycache._compute.workers:
    one CPU worker per node of a cluster of several; on one node, DDP's workers would share its
    cores and memory after seconds of start-up, so a part too large for memory is streamed
    here instead, see resolve_placement)."""
    setting = cfg.resources.num_workers
    size = feature_bytes(rows, head.in_dim)
    if setting == "auto" and cfg.resources.use_gpu:
        features = f"{size / 2**30:.2f} GiB of features"
        if size < AUTO_LOCAL_BYTES:
            return 0, f"on this machine's GPU: {features}"
        gpus = max(int(cluster(cfg).cluster_resources().get("GPU", 1)), 1)
        return gpus, f"one worker per GPU: {features}"
    room = Room(0) if setting != "auto" else Room.here()
    return decide(setting, size, room, key="resources.num_workers", streams=True)


def resolve_placement(cfg: TrainConfig, head: HeadSpec, rows: int, workers: int) -> str:
    """auto: in memory (gpu with use_gpu, else cpu) when each worker's part fits its memory
    (raycache._compute.workers.fits: the smallest node's, split between the workers); else
    stream."""
    if cfg.resources.placement != "auto":
        return cfg.resources.placement
    if workers == 0:  # local mode: this process's machine
        world, room = 1, memory()
    else:
        world = workers
        room = min(n["Resources"].get("memory", 0)
                   for n in cluster(cfg).nodes() if n.get("Alive"))
    if fits(feature_bytes(rows, head.in_dim) / world, room / world):
        return "gpu" if cfg.resources.use_gpu else "cpu"
    return "stream"


def cluster(cfg: TrainConfig) -> Any:
    """Ray, connected: only the DDP path and its auto choices need a cluster."""
    import ray

    from raycache._compute.cluster import connect

    connect(cfg.progress)
    return ray
