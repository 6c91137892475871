"""The streaming stage runner of fill and predict: read units -> prepare -> the model (a pool of
tasks on CPUs, of actors on GPUs) -> the caller's sink, as a lazy Ray Data dataset or the same
stage classes in this process."""

from __future__ import annotations

import contextlib
import copy
import pickle
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from raycache._compute import model_actor
from raycache._compute.actor import set_threads, whole_torch
from raycache._compute.memo import memo
from raycache._compute.pool import LIGHT_CPUS, READ_CPUS, Pool
from raycache._compute.prepare import Inputs, PrepareActor
from raycache._compute.stage import Stage
from raycache._core import started
from raycache._core.secrets import seal
from raycache._errors import EncoderError
from raycache._source import files as sources

if TYPE_CHECKING:
    from raycache._encoders.config import EncoderConfig

__all__ = ["FEED_MIN_ROWS", "ONE_THREAD", "Job", "ModelChain", "Shipped", "SinkActor", "Stage",
           "build", "chain_task", "feed", "feed_rows", "progress_bar", "ramp_parts", "ramp_sizes",
           "ramped", "run", "run_local", "stream", "where"]

FEED_MIN_ROWS = 1024
"""Rows per block into a GPU pool's tokenising actors at least."""
ONE_THREAD = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
"""The environment of a GPU pool's tokenising actors: one of them a core, each one thread."""


@dataclass
class Job:
    """What the runner streams: the units read, the prepare stage's encoders and passthrough
    columns, the model (an actor class taking `pool`), and the sink after it (a task), if any."""

    units: list[sources.Unit]
    format: str
    options: dict[str, Any]
    rows: int
    """Rows per model call (and per block of the re-blocked reads)."""
    encoders: list[EncoderConfig]
    passthrough: list[str]
    """Columns read and carried through unchanged beside the model's outputs."""
    model: Stage
    inputs: Inputs | None = None
    """The prepare stage's own inputs (see compute.prepare.Inputs); None: every row."""
    sink: Stage | None = None
    ordered: bool = False
    """Output in input order (Ray Data's preserve_order)."""
    ramp: int = 0
    """In this process, the first block cut into pieces of this many rows, as many again, then
    doubling (r, r, 2r, 4r, ... up to half the block), so progress moves within seconds of the
    start; on Ray, the same pieces run first (ramp_parts); 0: every block whole."""
    whole: bool = False
    """On Ray, each read unit one model call (the ramp's pieces), not blocks of `rows`."""

    def __post_init__(self) -> None:
        self.options = seal(self.options)  # read tasks' arguments show credentials redacted

    @property
    def columns(self) -> list[str]:
        """Columns read: the passthrough ones and the encoders' inputs."""
        return list(dict.fromkeys([*self.passthrough, *(e.input for e in self.encoders)]))


def where(pool: Pool, local: bool, why: str = "") -> str:
    """Where a job ran, and why, in words."""
    said = f"in-process, {pool.threads} thread(s)" if local else pool.describe()
    return f"{said} ({why})" if why else said


def run(job: Job, pool: Pool, *, local: bool) -> Iterator[pa.Table]:
    """The job's output batches (the sink's, else the model's), in this process or on Ray."""
    if local:
        return run_local(job, pool)
    return _on_ray(ramp_parts(job) if pool.tasks else [job], pool)


def _on_ray(parts: list[Job], pool: Pool) -> Iterator[pa.Table]:
    """The output of each part of a job on Ray, one part after the other (a CPU pool's workers
    keep their models between them, _compute.memo)."""
    for i, part in enumerate(parts):
        ds = build(part, pool)
        if not i:
            started.mark("built")
        yield from stream(ds)


def run_local(job: Job, pool: Pool) -> Iterator[pa.Table]:
    """The pipeline's stages called in this process, one model-call-sized piece at a time: the
    same reads, prepare stage, model and sink, hence the same output, in order. Reading and
    preparing the next piece, and the sink (a fill's shard writes), run in two threads beside
    the model's (pyarrow, tokenizers, file writes and torch release the GIL), so the model's
    threads wait on neither."""
    import torch

    threads = torch.get_num_threads()  # the model sets its own; the caller's come back after
    try:
        chain = ModelChain(job, pool, local=True)
        with (ThreadPoolExecutor(1, thread_name_prefix="raycache-read") as reads,
              ThreadPoolExecutor(1, thread_name_prefix="raycache-sink") as sinks):
            done: deque[Future[pa.Table]] = deque()
            for prepared in _ahead(reads, map(chain.prepare, ramped(_pieces(job), job.ramp))):
                done.append(sinks.submit(chain.finish, chain.model(prepared)))
                if len(done) > 1:  # one sink call in flight behind the model
                    yield done.popleft().result()
            while done:
                yield done.popleft().result()
    finally:
        torch.set_num_threads(threads)


def _pieces(job: Job) -> Iterator[pa.Table]:
    """The job's rows in model-call-sized pieces, cut as Ray Data's re-blocking cuts them."""
    held: list[pa.Table] = []  # pieces of units read in part (a resume, a new version)
    for unit in job.units:
        for piece in sources.read_unit(unit, job.format, job.options, job.rows, job.columns):
            if not unit.done:
                yield piece
                continue
            held.append(piece)
            if sum(t.num_rows for t in held) >= job.rows:  # a block, as Ray Data cuts
                yield pa.concat_tables(held)
                held = []
    if held:
        yield pa.concat_tables(held)


def ramped(pieces: Iterator[pa.Table], first: int) -> Iterator[pa.Table]:
    """`pieces`, the first one cut as Job.ramp says (`first` rows, as many again, then
    doubling up to half of it); the rest as they are."""
    head = next(pieces, None)
    if head is None:
        return
    at = 0
    for size in ramp_sizes(head.num_rows, first):
        yield head.slice(at, size)
        at += size
    yield from pieces


def ramp_sizes(rows: int, first: int) -> list[int]:
    """A block of `rows` cut as Job.ramp says: `first`, as many again, then doubling up to half
    of it (`rows` whole where `first` is 0 or not less)."""
    sizes, n = [], rows
    while first and n > first:
        sizes.insert(0, n - n // 2)
        n //= 2
    return [n, *sizes]


def ramp_parts(job: Job) -> list[Job]:
    """The job on Ray as parts run one after the other, so its progress moves as early as in
    this process: the first unit's first block (Job.ramp's pieces, each one read unit and one
    model call), then the rest; the job whole where it has no ramp."""
    todo = job.units[0].todo() if job.units else None
    sizes = ramp_sizes(min(job.rows, todo or 0), job.ramp)
    if not job.ramp or len(sizes) < 2:
        return [job]
    pieces, rest = job.units[0].cut(sizes)
    head = copy.copy(job)  # copied, not replaced: __post_init__ would seal the options again
    head.units, head.whole = pieces, True
    tail = copy.copy(job)
    tail.units = ([rest] if rest else []) + job.units[1:]
    return [head, tail] if tail.units else [head]


def _ahead(pool: ThreadPoolExecutor, items: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """`items`, the next one computed in `pool` while the caller works on this one."""
    end = object()
    future = pool.submit(next, items, end)
    while (item := future.result()) is not end:
        future = pool.submit(next, items, end)
        yield item


class ModelChain:
    """prepare -> model -> sink as one callable: the stages as run in this process, and as one
    task per block of a CPU-only pool on Ray (no object-store hop between them: on CPUs the
    three share the same cores, so a hop costs more than it overlaps)."""

    def __init__(self, job: Job, pool: Pool, local: bool = False):
        whole_torch("model stage")
        self.prepare = PrepareActor(job.encoders, job.passthrough, job.inputs)
        self.model = job.model.fn(pool=pool, **job.model.kwargs,
                                  **(job.model.local if local else {}))
        self.sink = job.sink

    def __call__(self, table: pa.Table) -> pa.Table:
        return self.finish(self.model(self.prepare(table)))

    def finish(self, out: pa.Table) -> pa.Table:
        """The sink's output for the model's (the model's own where there is no sink)."""
        return self.sink.fn(out, **self.sink.kwargs) if self.sink else out


@dataclass(frozen=True)
class Shipped:
    """A job put in Ray's object store once by the driver: a task fetches it only where its
    worker process has not built the job's stages yet."""

    ref: Any
    """The job's ray.ObjectRef (inside this holder Ray passes it as it is, unfetched)."""


def chain_task(table: pa.Table, job: Shipped, pool: Pool) -> pa.Table:
    """Ray Data task of a CPU pool: one block through prepare, model and sink, with the job's
    ModelChain that this worker process built for an earlier block (built now, the job fetched
    once, where there is none): no actor to start, each model loaded once a process."""
    started.once("task")
    chain = memo("chain", job.ref.hex(), lambda: _built(job, pool), apart=True)
    set_threads(pool)  # another job's stages in this process may have set others
    return chain(table)


def _built(job: Shipped, pool: Pool) -> ModelChain:
    """The ModelChain of a shipped job, built in this worker process."""
    import ray

    with started.span("chain"):
        return ModelChain(ray.get(job.ref), pool)


def build(job: Job, pool: Pool) -> Any:
    """The job as a lazy Ray Data dataset (nothing runs until consumed). On a CPU-only pool,
    read units -> chain_task tasks (prepare, model and sink in one call per block, the stages
    kept by each worker process between blocks). On GPUs, `feed`: reads cut into small blocks
    -> a tokenising actor pool at full size -> the model actors (compute.model_actor), one
    block of job.rows a call, each writing its block's shards itself (the sink) while the
    next block runs on its device."""
    import ray
    import ray.data

    ds = ray.data.from_items([{"unit": pickle.dumps(u)} for u in job.units],
                             override_num_blocks=len(job.units))  # one read task per unit
    if pool.tasks:
        ds = _reads(ds, job, job.rows).map_batches(  # blocks spread over the pool
            chain_task, fn_kwargs=dict(job=Shipped(ray.put(job)), pool=pool),
            batch_size=None if job.whole else job.rows,
            compute=ray.data.TaskPoolStrategy(size=pool.actors),
            num_cpus=pool.cpus, batch_format="pyarrow")
    else:
        ds = feed(ds, job, pool)
    if job.ordered:
        ds.context.execution_options.preserve_order = True
    return ds


def _reads(ds: Any, job: Job, rows: int) -> Any:
    """Read units -> blocks of `rows` rows (the re-blocking fused into the read task)."""
    return ds.map_batches(
        sources.read_stage, batch_size=1, num_cpus=READ_CPUS, batch_format="pyarrow",
        fn_kwargs=dict(fmt=job.format, options=job.options, rows=rows, columns=job.columns),
    ).repartition(target_num_rows_per_block=rows)


def feed_rows(job: Job, pool: Pool) -> int:
    """Rows per block going into the tokenising pool: a model call's rows cut so that the
    first one reaches every tokenising actor (at least FEED_MIN_ROWS, so a block's hop costs
    little beside its tokenising)."""
    return max(FEED_MIN_ROWS, -(-job.rows // pool.prepare_actors))


def feed(ds: Any, job: Job, pool: Pool) -> Any:
    """The GPU pipeline over a dataset of read units (see build)."""
    import ray.data

    full = ray.data.ActorPoolStrategy  # every pool started at its size, none grown from one
    ds = _reads(ds, job, feed_rows(job, pool)).map_batches(
        PrepareActor, fn_constructor_kwargs=dict(encoders=job.encoders, inputs=job.inputs,
                                                 passthrough=job.passthrough),
        batch_size=None, num_cpus=pool.prepare_cpus, batch_format="pyarrow",
        compute=full(size=pool.prepare_actors),
        # one thread each; and a remote argument the read has not, so Ray Data keeps the two
        # apart (fused, tokenising would run only as wide as the source's read units)
        runtime_env={"env_vars": ONE_THREAD})
    shape = model_actor.SHAPES[model_actor.SHAPE]
    apart = shape.writers_apart and job.sink is not None
    ds = ds.map_batches(  # the sink (a fill's writes) in the model actor: only records out
        model_actor.named(job.model.fn), fn_constructor_kwargs=dict(
            pool=pool, model=job.model, sink=None if apart else job.sink),
        batch_size=job.rows,  # one call per block; Ray Data needs it for GPU stages
        compute=model_actor.compute(pool.actors, shape), num_cpus=pool.cpus,
        num_gpus=pool.gpus, batch_format="pyarrow")
    if apart:  # the shape before: the vectors cross the object store to write actors
        ds = ds.map_batches(SinkActor, fn_constructor_kwargs=dict(sink=job.sink),
                            batch_size=None, num_cpus=LIGHT_CPUS, batch_format="pyarrow",
                            compute=full(size=pool.writers))
    return ds


class SinkActor:
    """Ray Data actor of a GPU pool's sink in the shape before (model_actor.SHAPES "apart",
    for the benches' comparison): write actors started with the pool."""

    def __init__(self, sink: Stage):
        self.sink = sink

    def __call__(self, table: pa.Table) -> pa.Table:
        return self.sink.fn(table, **self.sink.kwargs)


def stream(ds: Any) -> Iterator[pa.Table]:
    """A dataset's batches as its stages finish them; a stage's error re-raised as raycache's
    own."""
    from raycache._compute.cluster import unwrap

    batches = ds.iter_batches(batch_size=None, batch_format="pyarrow")
    del ds  # what a caller keeps of the error must not keep the execution, and its actors, alive
    try:
        yield from batches
        return
    except Exception as exc:  # Ray wraps stage errors in its own types
        error = unwrap(exc)
        if error is exc and _actor_died(exc):
            error = EncoderError(
                f"an actor of the model stage died ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0][:300]}); what was written is kept: run the "
                "same command again (a fill resumes from its recorded shards)")
        error.add_note(f"(raised in a Ray Data stage: {type(exc).__name__})")
    del batches
    raise error  # outside the handler: no chain to Ray's traceback and the executor's frames


def _actor_died(exc: BaseException) -> bool:
    from ray.exceptions import RayActorError

    seen: list[BaseException | None] = [exc, exc.__cause__, exc.__context__]
    return any(isinstance(e, RayActorError) for e in seen)


@contextlib.contextmanager
def progress_bar(show: bool, total: int | None, desc: str) -> Iterator[Any]:
    """A progress bar of rows (hidden unless `show`), closed on the way out."""
    from tqdm.std import tqdm  # a text line in terminals and notebooks alike (no ipywidgets)

    class Bar(tqdm):
        """No monitor thread: tqdm never stops it, and woken at exit it races the interpreter
        finalising (what a bar updated once a model call needs none of)."""

        monitor_interval = 0

    bar = Bar(total=total, disable=not show, unit=" rows", desc=desc, dynamic_ncols=True,
               smoothing=0.1)
    try:
        yield bar
    finally:
        bar.close()
