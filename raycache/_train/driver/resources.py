"""A run's workers checked against what runs them before Ray Train starts (as fills check their
encoder pools): a run the cluster cannot hold is refused, never left waiting without end."""

from __future__ import annotations

import math

from raycache._errors import ConfigError
from raycache._train.config import ResourcesConfig

__all__ = ["check_local", "problems", "request"]


def problems(res: ResourcesConfig, workers: int, nodes: list[dict[str, float]]) -> list[str]:
    """Why `workers` DDP workers of `res` do not fit on the cluster's `nodes` (each node's
    resources); none where they fit, or where the cluster adds nodes on demand."""
    if not workers or res.autoscaling:
        return []
    cpus = [n.get("CPU", 0.0) for n in nodes]
    gpus = [n.get("GPU", 0.0) for n in nodes]
    has = (f"the cluster has {sum(cpus):g} CPUs and {sum(gpus):g} GPUs on {len(nodes)} "
           "node(s)")
    if res.use_gpu and not sum(gpus):
        return [f"resources.use_gpu=true: {has}; set use_gpu: false to train on CPUs, connect "
                "to a cluster with GPUs, or set resources.autoscaling: true where GPU nodes "
                "start on demand"]
    fits = sum(min(_fit(c, res.cpus_per_worker), _fit(g, 1.0) if res.use_gpu else workers)
               for c, g in zip(cpus, gpus, strict=True))
    if workers <= fits:
        return []
    each = f"{res.cpus_per_worker:g} CPU" + (" + 1 GPU" if res.use_gpu else "")
    return [f"resources.num_workers={workers} workers x {each} each: {has}, which hold {fits} "
            f"such worker(s). Set resources.num_workers to at most {fits}"
            + ("" if res.use_gpu else " (or lower resources.cpus_per_worker)")
            + ", or set resources.autoscaling: true where nodes start on demand"]


def request(res: ResourcesConfig, workers: int) -> dict[str, list[dict[str, float]]]:
    """The bundles an autoscaling cluster is asked for, one per worker."""
    bundle = {"CPU": res.cpus_per_worker, **({"GPU": 1.0} if res.use_gpu else {})}
    return {"bundles": [bundle] * workers}


def check_local(res: ResourcesConfig) -> None:
    """In-process training (num_workers: 0) on this machine's GPU needs one."""
    import torch

    if res.use_gpu and not torch.cuda.is_available():
        raise ConfigError(["resources.use_gpu=true, but this process trains in-process "
                           "(resources.num_workers: 0, or auto for a small cache) and sees no "
                           "CUDA GPU; set use_gpu: false, or run on a machine with a GPU"])


def _fit(have: float, each: float) -> int:
    return max(0, math.floor(have / each + 1e-9))
