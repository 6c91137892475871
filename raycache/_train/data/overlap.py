"""Shards as they land: a fill run in a background thread, and training's first pass over its
shards in the order their progress records appear (`raycache pipeline` with overlap: true).

Epoch 1 reads each shard once as it lands, its training rows shuffled within the shard (the
order cannot be the full-cache shuffle: the cache is not there yet); under DDP the k-th shard to
land goes to worker k mod world, the order told to every worker by an OverlapFeed actor
(raycache._train.data.overlap_feed). Validation waits for the commit and then runs on the whole
validation split, as usual. Every later epoch is the ordinary read of the committed cache in
the run's placement.
A fill that fails stops the training with FillFailed; its shards and records stay, so running
it again resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pyarrow as pa
import torch

from raycache._cache.committed import Cache
from raycache._cache.entry_rows import file_path, is_shared, reads_whole, selection
from raycache._cache.records import ShardEntry, ShardRecord
from raycache._cache.store import PROGRESS
from raycache._errors import FillFailed
from raycache._fill.commit import manifest_of, resumable
from raycache._fill.plan import Plan
from raycache._fill.run import FillResult, complete
from raycache._fit.part import keeps
from raycache._fit.split import validation_mask
from raycache._train.data.streamed import Streamed
from raycache._train.runspec import WorkerSpec

__all__ = ["POLL_S", "PREFIX", "Feed", "OverlapFill", "OverlapRows", "overlap_sources"]

POLL_S = 0.2
"""Seconds between two looks for newly written shard records."""
PREFIX = "raycache-overlap-"
"""How an overlap's id, the name of its OverlapFeed actor, begins: the id travels in the
WorkerSpec (`overlap_feed`), so a driver and its workers always read the same one."""

RUNNING: dict[str, OverlapFill] = {}
"""Fills under way in this process, by their id (what a WorkerSpec's `overlap_feed` names)."""


class OverlapFill:
    """A fill running in a background thread of this process, and what training needs to know
    of it before it commits: its records, the source's key and label columns (the methods of a
    committed cache's source, raycache._train.data.committed.Committed)."""

    overlap = "this run trains on a fill as it lands"
    """Why its rows are not all there: epoch 1 reads the fill's shards as they land."""

    def __init__(self, plan: Plan, verify: bool):
        self.plan, self.verify = plan, verify
        self.dir = plan.dir
        self.id = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        self.feed_actor: Any = None
        """The OverlapFeed actor that tells DDP workers of the landed shards (None in-process)."""
        self.poster: threading.Thread | None = None
        self.done = threading.Event()
        self.filled: FillResult | None = None
        self.error: BaseException | None = None
        self.source: pa.Table | None = None
        self.thread = threading.Thread(target=self._fill, name="raycache-fill", daemon=True)

    @classmethod
    def start(cls, plan: Plan, verify: bool) -> OverlapFill:
        fill = cls(plan, verify)
        RUNNING[fill.id] = fill
        fill.thread.start()
        return fill

    def _fill(self) -> None:
        try:
            self.filled = complete(self.plan, resumable(self.plan))
        except BaseException as exc:  # re-raised in the training thread, as FillFailed
            self.error = exc
        finally:
            self.done.set()

    def close(self) -> None:
        """Wait for the fill to end (committed, or failed with its records kept)."""
        self.thread.join()
        if self.poster is not None:
            self.poster.join()
        if self.feed_actor is not None:
            import ray

            ray.kill(self.feed_actor)
        RUNNING.pop(self.id, None)

    def result(self) -> FillResult:
        """The committed fill, once it is (FillFailed if it failed)."""
        self.done.wait()
        if self.error is not None:
            p = self.plan
            kept = sum(name.endswith(".json")
                       for name in p.store.listdir(f"{self.dir}/{PROGRESS}"))
            raise FillFailed(
                f"the fill of {p.cfg.name}/{p.fingerprint} that training was reading failed: "
                f"{type(self.error).__name__}: {self.error}. No manifest was written and its "
                f"{kept} written shard(s) are kept: run the pipeline again to resume the fill "
                "(it encodes only the missing rows)") from self.error
        assert self.filled is not None
        return self.filled

    def records(self) -> Iterator[ShardRecord | ShardEntry]:
        """Each shard's record once, in the order they land, until the fill commits (then the
        manifest's shards not seen yet); FillFailed when the fill fails."""
        store, seen = self.plan.store, set()
        while True:
            finished = self.done.is_set()  # before listing: nothing can land unseen after it
            new = []
            for name in sorted(store.listdir(f"{self.dir}/{PROGRESS}")):
                if not name.endswith(".json"):  # a shard's key summary
                    continue
                with contextlib.suppress(FileNotFoundError):  # the commit removes them
                    record = ShardRecord.from_json(
                        store.read_json(f"{self.dir}/{PROGRESS}/{name}"))
                    if record.path not in seen and store.exists(f"{self.dir}/{record.path}"):
                        new.append(record)
            for record in sorted(new, key=lambda r: r.written or 0.0):
                seen.add(record.path)
                yield record
            if finished:  # the rest: a resumed fill's, or shared with an older version
                for s in self.result().cache.manifest.shards:
                    if s.path not in seen or is_shared(s):
                        yield s
                return
            self.done.wait(POLL_S)

    def cache(self) -> Cache:
        """The cache as it will be, with no shards yet: waits for the first shard (its record
        gives the encoders' dims)."""
        first = next(self.records(), None)
        if first is None or first.dims is None:  # committed at once: the manifest has them
            return self.result().cache
        return Cache(self.plan.store, dataclasses.replace(
            manifest_of(self.plan, [first], 0.0), shards=[]))

    def column(self, name: str) -> pa.ChunkedArray:
        """A key or label column of every source row, read from the source (cheap next to
        encoding it)."""
        from raycache._source import files as sources

        if self.source is None:
            p = self.plan
            keep = list(dict.fromkeys([p.cfg.source.key, *p.cfg.source.labels]))
            units, _ = sources.plan_units(p.files, p.format, p.cfg.source.options,
                                          p.cfg.rows_per_shard)
            pieces = [piece.select(keep) for u in units
                      for piece in sources.read_unit(u, p.format, p.cfg.source.options,
                                                     p.cfg.rows_per_shard, keep)]
            self.source = pa.concat_tables(pieces)
        return self.source.column(name)

    def rows(self, key: str) -> int:
        """The rows the cache will hold: the source's `key` column's."""
        return len(self.column(key))

    def train_rows(self, spec: WorkerSpec, rank: int) -> int:
        """Rank's training rows in the committed cache (its contiguous part, less the
        validation split): what its schedule counts steps by, known before the commit."""
        keys = self.column(spec.key)
        lo, hi = len(keys) * rank // spec.world, len(keys) * (rank + 1) // spec.world
        part = keys.slice(lo, hi - lo)
        held_out = validation_mask(part, spec.recipe.evaluation.val_fraction)
        return len(part) - int(held_out.true_count)

    def committed_spec(self) -> dict[str, Any]:
        """What a run spec of the committed cache changes (waits for the commit; FillFailed)."""
        cache = self.result().cache
        m = cache.manifest
        return {"overlap_feed": "", "rows": m.rows,
                "shards": tuple((p, s.rows) for p, s in zip(cache.shard_paths(), m.shards,
                                                            strict=True)),
                "checks": tuple((s.bytes, s.sha256) for s in m.shards) if self.verify else (),
                "keeps": keeps(m.shards)}

    def committed(self) -> Cache:
        """The committed cache (waits for the commit; FillFailed)."""
        return self.result().cache

    def final(self, spec: WorkerSpec) -> WorkerSpec:
        """The run spec of the committed cache (waits for the commit; FillFailed)."""
        return spec.replace(**self.committed_spec())

    def runspec(self, spec: WorkerSpec) -> WorkerSpec:
        """The spec of a run whose first pass reads this fill as it lands; with DDP workers,
        the OverlapFeed that tells them of it is started here (Ray is connected)."""
        spec = spec.replace(overlap_feed=self.id)
        if spec.num_workers:
            from raycache._train.data.overlap_feed import NAMESPACE, OverlapFeed

            self.feed_actor = OverlapFeed.options(name=self.id, namespace=NAMESPACE).remote(
                self.dir, self.verify, [self.train_rows(spec, r) for r in range(spec.world)])
            self.poster = threading.Thread(target=self._post, daemon=True,
                                           name="raycache-feed")
            self.poster.start()
        return spec

    def _post(self) -> None:
        """Post each record to the OverlapFeed actor as it lands, then the commit or the error."""
        try:
            for record in self.records():
                self.feed_actor.add.remote(record)
            self.feed_actor.commit.remote(self.committed_spec())  # no store: workers keep theirs
        except BaseException as exc:  # FillFailed: every worker raises it
            self.feed_actor.fail.remote(str(exc))


class Feed(Protocol):
    """A fill under way as a first pass reads it: the OverlapFill itself in the driver's process,
    a raycache._train.data.overlap_feed.RemoteOverlapFeed in a DDP worker."""

    dir: str
    verify: bool

    def records(self) -> Iterator[ShardRecord | ShardEntry]: ...
    def rows(self, key: str) -> int:
        """The rows the cache will hold: the source's `key` column's."""
        return len(self.column(key))

    def train_rows(self, spec: WorkerSpec, rank: int) -> int: ...
    def committed(self) -> Cache:
        """The committed cache (waits for the commit; FillFailed)."""
        return self.result().cache

    def final(self, spec: WorkerSpec) -> WorkerSpec: ...


class OverlapRows:
    """A worker's training or validation data while the fill runs: the first training pass
    over its deal of the shards as they land; everything else from the committed cache
    (validation waits)."""

    overlap = OverlapFill.overlap
    """Why its first pass cannot see every row (rows.Rows)."""

    def __init__(self, feed: Feed, committed: Callable[[], tuple[Any, Any]], spec: WorkerSpec,
                 rank: int, validation: bool):
        self.feed, self.committed, self.spec, self.rank = feed, committed, spec, rank
        self.validation, self.passed = validation, False

    def __len__(self) -> int:
        """Training rows: this worker's part of the committed cache for an in-memory
        placement (the number the schedule counts steps by); 0 (estimated from rows) for a
        streamed one."""
        if self.passed:
            return len(self.committed()[self.validation])
        if self.validation or self.spec.placement == "stream":
            return 0
        return self.feed.train_rows(self.spec, self.rank)

    def batches(self, batch_size: int, seed: int | None, then: int | None = None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.validation or self.passed:
            yield from self.committed()[self.validation].batches(batch_size, seed, then)
            return
        self.passed = True
        # a stream over the shards landed so far: the same checked read, split and shuffle
        stream = Streamed(self.spec.replace(shards=(), rows=0, checks=()), 0,
                          False, torch.device("cpu"))
        x, y = torch.empty(0), torch.empty(0, dtype=torch.int64)  # rows short of a batch
        world = self.spec.world
        for k, record in enumerate(self.feed.records()):
            if k % world != self.rank:  # the k-th shard to land is worker k mod world's
                continue
            path = f"{self.feed.dir}/{record.path}"
            if isinstance(record, ShardEntry):  # committed: maybe shared, maybe in part
                path = file_path(self.spec.store, self.feed.dir, record)
                if not reads_whole(record):
                    stream.spec = stream.spec.replace(
                        shards=(*stream.spec.shards, (path, record.rows)),
                        keeps=(*(stream.spec.keeps or [("", 0)] * len(stream.spec.shards)),
                               selection(record)))
            stream.pieces.append((path, 0, record.rows))
            if self.feed.verify:
                stream.checks[path] = (record.bytes, record.sha256)
            xs, ys = stream.read(len(stream.pieces) - 1, None if seed is None else seed + k)
            x, y = torch.cat([x.reshape(-1, xs.shape[1]), xs]), torch.cat([y, ys])
            whole = len(y) - len(y) % batch_size  # full batches now, the rest with the next
            for j in range(0, whole, batch_size):
                yield x[j : j + batch_size], y[j : j + batch_size]
            x, y = x[whole:], y[whole:]
        if len(y):
            yield x, y
        stream.pool.shutdown()


def overlap_sources(spec: WorkerSpec, rank: int, device: torch.device,
                    data_sources: Callable[[WorkerSpec, int, torch.device], tuple[Any, Any]]
               ) -> tuple[OverlapRows, OverlapRows]:
    """(train, validation) of a run whose fill is under way on the driver (in this process,
    or told by its OverlapFeed to a DDP worker); `data_sources` builds the ordinary ones once
    the fill has committed."""
    feed: Feed | None = RUNNING.get(spec.overlap_feed)
    if feed is None:
        from raycache._train.data.overlap_feed import RemoteOverlapFeed

        feed = RemoteOverlapFeed(spec.overlap_feed)
    built: list[tuple[Any, Any]] = []

    def committed() -> tuple[Any, Any]:
        if not built:
            built.append(data_sources(feed.final(spec), rank, device))
        return built[0]

    return (OverlapRows(feed, committed, spec, rank, False),
            OverlapRows(feed, committed, spec, rank, True))
