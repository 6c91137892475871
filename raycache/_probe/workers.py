"""How many workers a probe runs on: its features' bytes and this machine's available memory,
given to the decision of how many that training shares (raycache._compute.workers.decide)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raycache._compute.workers import Room, decide, feature_bytes

if TYPE_CHECKING:
    from raycache._probe.config import ProbeConfig
    from raycache._probe.plan import Target

__all__ = ["resolve", "target_bytes"]


def target_bytes(targets: list[Target]) -> int:
    """Bytes of every target's features and class ids as the in-process path holds them at once:
    rows x (dim float32 + an int64 label)."""
    return sum(feature_bytes(t.cache.manifest.rows, t.spec.in_dim) for t in targets)


def resolve(cfg: ProbeConfig, targets: list[Target]) -> tuple[int, str]:
    """(Ray workers, why) for this probe: 0 where its features fit in this process's available
    memory, else enough workers that each part fits (the cluster is asked without joining)."""
    if cfg.num_workers != "auto":
        return decide(cfg.num_workers, 0, Room(0))
    return decide("auto", target_bytes(targets), Room.here(available=True))
