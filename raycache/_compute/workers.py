"""How many workers cached features need, decided once for training and the probe: this process
(0 workers) or Ray workers that each hold a part of the rows, from the features' size, the
memory at hand and the cluster's CPU nodes; with the reason, in words."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from raycache._compute import where

__all__ = ["AUTO_LOCAL_BYTES", "BUDGET", "Room", "decide", "feature_bytes", "fits", "memory"]

BUDGET = 0.25
"""Features stay in one process while they take at most this fraction of its memory (the rest:
the read's Arrow table, the work on them, everything else)."""
AUTO_LOCAL_BYTES = 512 * 2**20
"""Training's auto with use_gpu, or on a cluster that cannot be asked, stays in this process
below this many feature bytes."""


def feature_bytes(rows: int, dim: int) -> int:
    """Bytes of `rows` rows of `dim` float32 features and an int64 label each."""
    return rows * (dim * 4 + 8)


def fits(size: float, memory: float) -> bool:
    """Whether `size` bytes of features fit in `memory`: at most BUDGET of it."""
    return size <= BUDGET * memory


def memory(available: bool = False) -> int:
    """This machine's memory in bytes: all of it, or (`available`) what is free now."""
    import psutil

    found = psutil.virtual_memory()
    return found.available if available else found.total


@dataclass(frozen=True)
class Room:
    """What a job on cached features could run on: this process's memory, and the Ray cluster
    this process is connected to or RAY_ADDRESS names (where.look; None: no cluster)."""

    memory: int
    """Bytes of memory the in-process path may use."""
    cluster: where.Cluster | None = None
    """The cluster's alive nodes; one with no nodes could not be asked."""

    @classmethod
    def here(cls, available: bool = False) -> Room:
        """This machine's memory (free now, or all of it) and the cluster found."""
        return cls(memory(available), where.look())

    @property
    def nodes(self) -> list[dict[str, float]]:
        """The cluster's alive nodes with CPUs (a node with none runs no worker)."""
        return [n for n in (self.cluster.nodes if self.cluster else ()) if n.get("CPU", 0) > 0]


def decide(setting: int | str, size: int, room: Room, *, key: str = "num_workers",
           streams: bool = False) -> tuple[int, str]:
    """(Ray workers, why): 0 runs in this process.

    One rule for both jobs: features that fit (`fits`) stay in this process. The jobs differ
    in what they can do with rows that do not: a training run (`streams`) streams them from the
    store, so it never needs more workers for memory, and takes DDP workers only where they are
    faster (one per node of a cluster of several); the probe cannot stream, so it splits them
    over enough workers that each part fits.

    Args:
        setting: The config's num_workers: a number (0: this process), or auto.
        size: Bytes of the features (feature_bytes).
        room: This process's memory and the cluster found.
        key: The setting's name, for the reason of a pinned number.
        streams: The job can stream rows that do not fit (training), else it splits them.

    Returns:
        The workers, and the reason in words.

    Example:
        ```python
        room = Room(memory=16 * 2**30)
        decide("auto", 2 * 2**30, room)   # (0, "2.00 GiB of features fit in this process ...")
        decide("auto", 10 * 2**30, room)  # (3, "10.00 GiB of features do not fit ...")
        ```
    """
    if setting != "auto":
        workers = int(setting)
        return workers, f"{key}: {workers}"
    features = f"{size / 2**30:.2f} GiB of features"
    nodes = room.nodes
    if streams:
        found = room.cluster
        if found is not None and not found.nodes:  # a cluster that cannot be asked
            return (0, features) if size < AUTO_LOCAL_BYTES else \
                (2, f"{features} on the cluster at {found.address}")
        if len(nodes) > 1:
            assert found is not None
            return len(nodes), f"one per node of {found.describe()}"
        cpus = nodes[0]["CPU"] if nodes else os.cpu_count() or 1
        held = "fit" if fits(size, room.memory) else "are streamed: they do not fit"
        return 0, f"one node with {cpus:g} CPUs; {features} {held} in memory"
    here = f"this process (a quarter of its {room.memory / 2**30:.1f} GiB available memory)"
    if fits(size, room.memory):
        return 0, f"{features} fit in {here}"
    workers = max(2, len(nodes), math.ceil(size / max(BUDGET * room.memory, 1)))
    return workers, (f"{features} do not fit in {here}: {workers} parts of "
                     f"{size / workers / 2**30:.2f} GiB")
