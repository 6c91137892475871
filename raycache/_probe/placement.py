"""Where a probe runs, decided from what is there: in this process where the features fit its
memory, else on Ray workers that each hold a share of the rows; with the reason, in words."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from raycache._compute import where

if TYPE_CHECKING:
    from raycache._probe.config import ProbeConfig
    from raycache._probe.plan import Target

__all__ = ["BUDGET", "decide", "feature_bytes", "resolve"]

BUDGET = 0.25
"""auto keeps a probe in this process while its features take at most this share of the
memory available here (the rest: the read's Arrow table, the methods' work, everything else)."""


def feature_bytes(targets: list[Target]) -> int:
    """Bytes of every target's features and class ids as the in-process path holds them at once:
    rows x (dim float32 + an int64 label)."""
    return sum(t.cache.manifest.rows * (t.spec.in_dim * 4 + 8) for t in targets)


def decide(setting: int | str, size: int, memory: int, nodes: int = 1) -> tuple[int, str]:
    """(Ray workers, why): 0 runs in this process.

    Args:
        setting: ProbeConfig.num_workers: a number (0: this process), or auto.
        size: Bytes of the features (feature_bytes).
        memory: Bytes of memory available to this process.
        nodes: Alive nodes with CPUs of the Ray cluster the probe would run on (1: none).

    Returns:
        auto: 0 where `size` is at most BUDGET of `memory`; else one worker per node at least,
        and enough that each holds at most BUDGET of `memory` (2 at least: one worker would
        hold as much as this process).

    Example:
        ```python
        decide("auto", 2 * 2**30, 16 * 2**30)   # (0, "2.00 GiB of features fit ...")
        decide("auto", 10 * 2**30, 16 * 2**30)  # (3, "10.00 GiB of features ...")
        ```
    """
    if setting != "auto":
        workers = int(setting)
        return workers, (f"num_workers: {workers}" if workers else "num_workers: 0")
    budget = BUDGET * memory
    features = f"{size / 2**30:.2f} GiB of features"
    if size <= budget:
        return 0, (f"{features} fit in this process (a quarter of its "
                   f"{memory / 2**30:.1f} GiB available memory)")
    workers = max(2, nodes, math.ceil(size / max(budget, 1)))
    return workers, (f"{features} do not fit in this process (a quarter of its "
                     f"{memory / 2**30:.1f} GiB available memory): {workers} shares of "
                     f"{size / workers / 2**30:.2f} GiB")


def resolve(cfg: ProbeConfig, targets: list[Target]) -> tuple[int, str]:
    """decide() for this probe: its features, this machine's available memory and the nodes of
    the cluster this process is connected to or RAY_ADDRESS names (asked without joining)."""
    if cfg.num_workers != "auto":
        return decide(cfg.num_workers, 0, 0)
    import psutil

    found = where.look()
    nodes = len([n for n in found.nodes if n.get("CPU", 0) > 0]) if found else 1
    return decide("auto", feature_bytes(targets), psutil.virtual_memory().available,
                  max(nodes, 1))
