"""A fill under way on the driver, told to DDP workers: the driver posts each shard's record
to an OverlapFeed actor as it lands, then the commit (or the fill's error); each worker
polls it for the records it has not seen, in one order, the same for every worker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import ray

from raycache._cache.records import ShardRecord
from raycache._errors import FillFailed, RaycacheError
from raycache._train.runspec import WorkerSpec

__all__ = ["NAMESPACE", "POLL_S", "OverlapFeed", "RemoteOverlapFeed"]

NAMESPACE = "raycache"
"""The Ray namespace of OverlapFeed actors (workers look theirs up by name)."""
POLL_S = 0.2
"""Seconds between a worker's two looks at its OverlapFeed actor."""


@ray.remote(num_cpus=0)
class OverlapFeed:
    """The landed shards' records in landing order, then the commit or the failure."""

    def __init__(self, folder: str, verify: bool, train_rows: list[int]):
        self.about = (folder, verify, train_rows)
        self.records: list[ShardRecord] = []
        self.final: dict[str, Any] | None = None
        self.error: str | None = None

    def info(self) -> tuple[str, bool, list[int]]:
        """(cache folder, whether reads are checked, each rank's first-pass training rows)."""
        return self.about

    def add(self, record: ShardRecord) -> None:
        self.records.append(record)

    def commit(self, final: dict[str, Any]) -> None:
        """What a run spec of the committed cache changes (OverlapFill.committed)."""
        self.final = final

    def fail(self, message: str) -> None:
        self.error = message

    def since(self, n: int) -> tuple[list[ShardRecord], dict[str, Any] | None, str | None]:
        """The records after the first n, the commit (None: not yet), the error."""
        return self.records[n:], self.final, self.error


class RemoteOverlapFeed:
    """A DDP worker's view of the driver's fill through its OverlapFeed actor (in-process, the
    OverlapFill of raycache._train.data.overlap is the feed): the records in the actor's order,
    and the committed spec once there is one."""

    def __init__(self, name: str):
        try:
            self.actor = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError as exc:
            raise RaycacheError(f"no fill {name!r} is under way on this cluster's driver; a "
                                "first pass over a fill as it lands needs the pipeline that "
                                "started it still running") from exc
        self.dir, self.verify, self.rows = ray.get(self.actor.info.remote())
        self.committed: dict[str, Any] | None = None

    def train_rows(self, spec: WorkerSpec, rank: int) -> int:
        return self.rows[rank]

    def records(self) -> Iterator[ShardRecord]:
        """Every record once, in the actor's order, until the commit; FillFailed on a failure.
        The driver's calls reach the actor in the order it made them: the commit comes last."""
        n = 0
        while True:
            new, final, error = ray.get(self.actor.since.remote(n))
            yield from new
            n += len(new)
            if error is not None:
                raise FillFailed(error)
            if final is not None:
                self.committed = final
                return
            if not new:
                time.sleep(POLL_S)

    def final(self, spec: WorkerSpec) -> WorkerSpec:
        """The run spec of the committed cache (waits for the commit; FillFailed)."""
        while self.committed is None:
            for _ in self.records():
                pass
        return spec.replace(**self.committed)
