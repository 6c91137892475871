"""The model stage of a GPU pool as one Ray Data actor: the model called under the actor's device
lock, the block's sink (a fill's shard writes) run after it in the same process, so only its
records cross the object store, while the next block's input is assembled and called."""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycache._compute.actor import whole_torch
from raycache._core import started
from raycache._core.marks import marking
from raycache._errors import RaycacheError, StoreError

if TYPE_CHECKING:
    import pyarrow as pa

    from raycache._compute.pool import Pool
    from raycache._compute.stage import Stage

__all__ = ["BLOCK_TIMES", "SHAPE", "SHAPES", "ModelActor", "Shape", "compute", "named"]

BLOCK_TIMES = "RAYCACHE_BLOCK_TIMES"
"""Bench-only: a folder (set in the environment before Ray starts) where each model actor adds
one JSON line a block, `model-<pid>.jsonl`: its rows, the bytes its call returned and its marks
(time.time): enter, device (the lock held), launched (where the model marks it), copied (the
model's output on the host), exit (the sink done); gpu_s where a stand-in adds it."""


@dataclass(frozen=True)
class Shape:
    """How a GPU pool's model stage runs."""

    calls: int
    """Ray Data calls at once on each model actor (max_concurrent_calls_per_actor): one in the
    model, the others assembling their input or writing their output. GPU memory holds one
    block's forward at a time (the device lock); host memory at most `calls` blocks."""
    threaded: bool
    """The calls run in threads of their own, the model under the actor's device lock (True); or
    the whole call under Ray Data's one-thread wrapper (False: only Ray's batching overlaps)."""
    writers_apart: bool = False
    """The sink in write actors of its own (SinkActor), each block's vectors crossing the
    object store to them: the shape before the writes moved into the model actor."""


SHAPES: dict[str, Shape] = {
    "overlap": Shape(calls=2, threaded=True),
    "ray-lock": Shape(calls=2, threaded=False),
    "serial": Shape(calls=1, threaded=False),
    "apart": Shape(calls=1, threaded=False, writers_apart=True),
}
"""The model stage's shapes; the benches measure each against the others in one run."""
SHAPE = "overlap"
"""The shape fills and predict run (a bench sets another on its driver to compare)."""


def compute(size: int, shape: Shape) -> Any:
    """The model stage's actor pool: `size` actors started whole, `shape.calls` calls at once
    on each and no more sent to it (at most that many blocks in an actor)."""
    import ray.data

    if shape.writers_apart:  # the shape before, as it was: Ray Data's defaults
        return ray.data.ActorPoolStrategy(size=size)
    return ray.data.ActorPoolStrategy(
        size=size, max_concurrent_calls_per_actor=shape.calls,
        max_tasks_in_flight_per_actor=shape.calls, enable_true_multi_threading=shape.threaded)


@functools.cache
def named(model: type) -> type[ModelActor]:
    """ModelActor under the model's class name, so that Ray Data's stage and its processes
    keep that name (MapBatches(EncodeActor), MapBatches(PredictActor))."""
    return type(model.__name__, (ModelActor,), {"__doc__": ModelActor.__doc__})


class ModelActor:
    """Ray Data actor of a GPU pool's model stage: the model (a Stage whose class takes `pool`),
    called one block at a time under the device lock, then the `sink` (if any) on its output
    in the calling thread, outside the lock: a block's shards are written while the next
    block runs on the device, and the call returns once they are, so the last block's records
    come out with its call and a writer's error fails that call."""

    def __init__(self, pool: Pool, model: Stage, sink: Stage | None = None):
        started.mark("model actor:start")
        whole_torch("model actor")
        self.model = model.fn(pool=pool, **model.kwargs)
        self.sink = sink
        self.device = threading.Lock()
        folder = os.environ.get(BLOCK_TIMES)
        self.times = Path(folder) / f"model-{os.getpid()}.jsonl" if folder else None
        started.mark("model actor:end")

    def __call__(self, table: pa.Table) -> pa.Table:
        marks = {"enter": time.time()}
        with marking(marks), self.device:
            marks["device"] = time.time()
            out = self.model(table)
            marks["copied"] = time.time()
        if self.sink is not None:
            out = self._sink(out)
        marks["exit"] = time.time()
        if self.times is not None:
            line = {"rows": table.num_rows, "out_bytes": out.nbytes, **marks}
            with open(self.times, "a") as f:
                f.write(json.dumps(line) + "\n")
        return out

    def _sink(self, out: pa.Table) -> pa.Table:
        try:
            return self.sink.fn(out, **self.sink.kwargs)
        except RaycacheError:
            raise
        except Exception as exc:  # a store's OSError, an Arrow error: said as raycache's own
            raise StoreError(
                f"writing the shards of a block of {out.num_rows} rows on the model actor failed "
                f"({type(exc).__name__}: {exc}); the shards written before it are kept and no "
                "manifest was written: fix the cause (the store's space, permissions or "
                "options) and run the same command again (a fill resumes from its recorded "
                "shards)") from exc
