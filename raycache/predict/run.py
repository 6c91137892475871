"""PREDICT: run a trained head (its frozen encoders live, then the head) over a file with Ray
Data (read -> prepare -> an actor pool that loads the head once per actor), or for a small CPU
job the same stages in this process, and write the outputs as one Parquet file, atomically."""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycache.cache.store import Store
from raycache.compute.pool import READ_CPUS, Pool
from raycache.core.config import AUTO, load
from raycache.errors import ConfigError, RaycacheError
from raycache.fill.run import AUTO_IN_PROCESS_ROWS
from raycache.source import files as sources
from raycache.source.config import SOURCE_FORMATS, SourceConfig

if TYPE_CHECKING:
    from raycache.heads.loaded import Head

__all__ = ["AUTO_IN_PROCESS_BYTES", "PredictConfig", "PredictPlan", "PredictResult",
           "build_pipeline", "in_process", "plan", "pool_for", "predict_file", "run_in_process"]

AUTO_IN_PROCESS_BYTES = 4 << 20
"""in_process: auto runs a CPU job on JSONL or CSV files (whose row count is unknown until
read) of at most this many bytes without Ray; Parquet is judged by rows, as fill does."""


@dataclass
class PredictConfig:
    checkpoint: str
    """A head checkpoint folder (TrainResult.checkpoint): a path or any fsspec URI."""
    input: str | list[str]
    """Parquet, JSONL or CSV: a file, folder or glob (or a list of them), local or any fsspec
    URI. It needs the input column of each of the head's encoders."""
    output: str
    """The Parquet file to write (a path or any fsspec URI); it appears whole or not at all."""
    keep: list[str] | None = None
    """Input columns copied to the output (default: the cache's key column when the input has
    it, else every column that is not an encoder input)."""
    overwrite: bool = False
    """Replace an existing output file (otherwise refused)."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the input's suffix when left out."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the checkpoint, the input and the output."""
    rows_per_batch: int = 1024
    """Rows per call of a predict actor (Ray Data's batch size)."""
    batch_size: int | str = AUTO
    """Rows per encoder forward pass at most (auto: 256 on CPU, 4096 on GPU)."""
    token_budget: int | str = AUTO
    """Padded tokens per forward pass at most, for text (auto: 2048 on CPU, 65536 on GPU)."""
    concurrency: int | str = AUTO
    """Predict actors (auto: every GPU / num_gpus, or the CPUs in actors of up to 4 threads)."""
    num_gpus: float | str = AUTO
    """GPUs per predict actor (auto: 1 when the cluster has GPUs, else 0: CPU actors)."""
    num_cpus: float | str = AUTO
    """CPUs per predict actor; its torch threads follow (auto: 1 with a GPU, else up to 4)."""
    autoscaling: bool = False
    """The cluster adds nodes on demand: ask for the pool instead of refusing it."""
    in_process: bool | str = AUTO
    """Run the same stages in this process, without Ray. auto: for a CPU job of at most
    20,000 Parquet rows (or 4 MiB of JSONL/CSV) when no Ray cluster is running or named."""
    progress: bool = True
    """Show a progress bar (rows) and the summary."""
    verbose: bool = False
    """Show Ray's and Ray Data's own logs and progress bars too."""

    def problems(self) -> list[str]:
        out = []
        if self.format not in (None, *SOURCE_FORMATS):
            out.append(f"format={self.format!r}: expected one of {SOURCE_FORMATS}")
        if self.rows_per_batch < 1:
            out.append(f"rows_per_batch={self.rows_per_batch}: expected a whole number >= 1")
        for name in ("batch_size", "token_budget", "concurrency"):
            v = getattr(self, name)
            if v != AUTO and (isinstance(v, str) or v < 1):
                out.append(f"{name}={v!r}: expected a whole number >= 1, or 'auto'")
        for name in ("num_gpus", "num_cpus"):
            v = getattr(self, name)
            if v != AUTO and (isinstance(v, str) or v < 0 or (name == "num_cpus" and v == 0)):
                out.append(f"{name}={v!r}: expected a number {'>=' if name == 'num_gpus' else '>'}"
                           " 0, or 'auto'")
        if self.in_process not in (True, False, AUTO):
            out.append(f"in_process={self.in_process!r}: expected true, false or 'auto'")
        elif self.in_process is True and self.num_gpus not in (0, AUTO):
            out.append("in_process=true runs no Ray actors, so num_gpus does not apply; set "
                       "num_gpus: 0, or in_process: auto to predict on GPU actors")
        return out


@dataclass
class PredictPlan:
    """Everything checked and decided on the driver before any work starts."""

    cfg: PredictConfig
    head: Head
    format: str
    files: list[sources.SourceFile]
    keep: list[str]
    columns: list[str]
    """Columns read from the input: the kept ones and the encoders' inputs."""
    schema: pa.Schema
    """The output's schema: the kept columns, then the head's output columns."""
    out: Store
    """The output file, as a Store whose root is the file."""


@dataclass
class PredictResult:
    """What a predict run wrote, and how long it took."""

    output: str
    rows: int
    columns: list[str]
    seconds: float
    where: str
    """Where it ran, in words."""

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (f"predict: {self.rows} rows -> {self.output} ({', '.join(self.columns)}), "
                f"{self.seconds:.1f} s, {rate:.1f} rows/s, {self.where}")

    def __repr__(self) -> str:
        return f"PredictResult({self.summary()})"


def plan(cfg: PredictConfig) -> PredictPlan:
    """Load the head, check the input's columns and the output's place; no Ray, no encoding."""
    from raycache.heads.loaded import load_head
    from raycache.predict.stage import OUTPUTS, output_fields

    head = load_head(cfg.checkpoint, **cfg.options)
    encoders = head.encoder_configs()
    fmt, files = sources.list_files(SourceConfig(cfg.input, cfg.format, options=cfg.options))
    schema = sources.read_schema(files[0], fmt, cfg.options)
    inputs = list(dict.fromkeys(e.input for e in encoders))
    uri = files[0].uri
    problems = [f"input column {c!r} (read by encoder {e.name!r} of the head) is not in "
                f"{uri!r}; its columns are {schema.names}. Rename the column in the input, or "
                "use a head trained on a cache of this column"
                for e in encoders for c in [e.input] if c not in schema.names]
    if cfg.keep is None:
        keep = ([head.key] if head.key in schema.names
                else [c for c in schema.names if c not in inputs])
    else:
        keep = list(dict.fromkeys(cfg.keep))
        problems += [f"keep: column {c!r} is not in {uri!r}; its columns are {schema.names}"
                     for c in keep if c not in schema.names]
    fields = output_fields(head)
    problems += [f"input column {c!r} has the name of an output column {list(OUTPUTS)}; leave "
                 "it out of keep (--keep), or rename it in the input"
                 for c in keep if c in {f.name for f in fields}]
    out = Store(cfg.output, cfg.options)
    if out.root in {Store(f.uri, cfg.options).root for f in files}:
        problems.append(f"output {cfg.output!r} is one of the input files; write elsewhere")
    elif out.is_dir(out.root):
        problems.append(f"output {cfg.output!r} is a folder; give the path of a Parquet file "
                        "to write, e.g. predictions.parquet")
    elif out.exists(out.root) and not cfg.overwrite:
        problems.append(f"output {cfg.output!r} exists; pass --overwrite (overwrite: true) to "
                        "replace it, or choose another output")
    if problems:
        raise ConfigError(problems)
    schema = pa.schema([schema.field(c) for c in keep] + fields)
    return PredictPlan(cfg, head, fmt, files, keep, list(dict.fromkeys([*keep, *inputs])), schema,
                       out)


def predict_file(config: PredictConfig | dict | str, *, progress: bool | None = None
                 ) -> PredictResult:
    """Run a trained head over an input file and write its outputs to a Parquet file
    (`config`: a PredictConfig, a dict or a YAML path)."""
    cfg = load(PredictConfig, config)
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    start = time.perf_counter()
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, cfg.options, cfg.rows_per_batch)
    rows = sum(u.rows or 0 for u in units) if p.format == "parquet" else None
    if in_process(cfg, rows, sum(f.size for f in p.files)):
        pool = pool_for(_resolved(cfg, 0.0), [{"CPU": float(os.cpu_count() or 1)}], 1)
        batches, where = run_in_process(p, units, pool), f"in-process, {pool.threads} thread(s)"
    else:
        from raycache.compute.cluster import connect
        from raycache.compute.pool import nodes

        connect(cfg.progress, cfg.verbose)
        pool = pool_for(cfg, nodes(), None if rows is None else -(-rows // cfg.rows_per_batch))
        if cfg.autoscaling:
            from ray.autoscaler.sdk import request_resources

            from raycache.compute.pool import request

            request_resources(**request(pool))
        batches, where = _batches(build_pipeline(p, units, pool)), pool.describe()
    written = _write(p, batches, rows)
    return PredictResult(p.out.url(p.out.root), written, p.schema.names,
                         time.perf_counter() - start, where)


def in_process(cfg: PredictConfig, rows: int | None, size: int) -> bool:
    """Whether the job runs its stages in this process (see PredictConfig.in_process)."""
    if cfg.in_process != AUTO:
        return bool(cfg.in_process)
    ray = sys.modules.get("ray")
    cluster = os.environ.get("RAY_ADDRESS") or (ray is not None and ray.is_initialized())
    small = rows <= AUTO_IN_PROCESS_ROWS if rows is not None else size <= AUTO_IN_PROCESS_BYTES
    return (not cluster and cfg.num_gpus in (0, AUTO) and cfg.concurrency == AUTO and small)


def pool_for(cfg: PredictConfig, cluster: list[dict[str, float]], blocks: int | None) -> Pool:
    """The predict actor pool on a cluster of `cluster` nodes for `blocks` batches of work:
    num_gpus auto is one GPU per actor where the cluster has GPUs, else CPU actors; sized and
    checked by resources.size_pool, as a fill's encoder pool is."""
    from raycache.compute.pool import size_pool

    gpus = (float(any(n.get("GPU", 0) > 0 for n in cluster)) if cfg.num_gpus == AUTO
            else float(cfg.num_gpus))
    return size_pool(_resolved(cfg, gpus), cluster, blocks)


def _resolved(cfg: PredictConfig, gpus: float) -> PredictConfig:
    """cfg with num_gpus decided, for resources.size_pool (which reads fill's pool fields)."""
    return dataclasses.replace(cfg, num_gpus=gpus)


def run_in_process(p: PredictPlan, units: list[sources.Unit], pool: Pool) -> Iterator[pa.Table]:
    """The pipeline's stages called in this process, one batch at a time: the same reads,
    preparing and predict actor, hence the same outputs."""
    import torch

    from raycache.fill.stages import PrepareActor
    from raycache.predict.stage import PredictActor

    cfg = p.cfg
    threads = torch.get_num_threads()  # the actor sets its own; the caller's come back after
    try:
        prepare = PrepareActor(p.head.encoder_configs(), p.keep)
        predict = PredictActor(cfg.checkpoint, cfg.options, pool)
        for unit in units:
            for piece in sources.read_unit(unit, p.format, cfg.options, cfg.rows_per_batch,
                                           p.columns):
                yield predict(prepare(piece))
    finally:
        torch.set_num_threads(threads)


def build_pipeline(p: PredictPlan, units: list[sources.Unit], pool: Pool) -> Any:
    """The job as a lazy Ray Data dataset of output rows, in input order (nothing runs until
    consumed): read units -> prepare (tokenise) -> predict actor pool."""
    import ray.data

    from raycache.fill.stages import PrepareActor
    from raycache.predict.stage import PredictActor

    cfg = p.cfg
    ds = ray.data.from_items([{"unit": pickle.dumps(u)} for u in units],
                             override_num_blocks=len(units))  # one read task per unit
    ds = ds.map_batches(
        sources.read_stage,
        fn_kwargs=dict(fmt=p.format, options=cfg.options, rows=cfg.rows_per_batch,
                       columns=p.columns),
        batch_size=1, num_cpus=READ_CPUS, batch_format="pyarrow",
    ).repartition(target_num_rows_per_block=cfg.rows_per_batch)  # blocks spread over the pool
    ds = ds.map_batches(
        PrepareActor, fn_constructor_kwargs=dict(encoders=p.head.encoder_configs(), keep=p.keep),
        batch_size=None, num_cpus=pool.prepare_cpus, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=pool.prepare_actors),
    )
    ds = ds.map_batches(
        PredictActor,
        fn_constructor_kwargs=dict(checkpoint=cfg.checkpoint, options=cfg.options, pool=pool),
        batch_size=cfg.rows_per_batch,  # Ray Data needs a batch size for GPU stages
        compute=ray.data.ActorPoolStrategy(size=pool.actors),
        num_cpus=pool.cpus, num_gpus=pool.gpus or None, batch_format="pyarrow",
    )
    ds.context.execution_options.preserve_order = True  # output rows in input order
    return ds


def _batches(ds: Any) -> Iterator[pa.Table]:
    """Output batches as the pool finishes them; a stage's error re-raised as raycache's own."""
    from raycache.compute.cluster import unwrap

    try:
        yield from ds.iter_batches(batch_size=None, batch_format="pyarrow")
    except Exception as exc:  # Ray wraps stage errors in its own types
        raise unwrap(exc) from exc


def _write(p: PredictPlan, batches: Iterator[pa.Table], total: int | None) -> int:
    """Stream the batches into the output file (whole, or nothing on an error); rows written."""
    from tqdm.auto import tqdm

    rows = 0
    bar = tqdm(total=total, disable=not p.cfg.progress, unit=" rows", desc="predict",
               dynamic_ncols=True, smoothing=0.1)
    try:
        with p.out.open_atomic(p.out.root) as f, pq.ParquetWriter(f, p.schema) as writer:
            for batch in batches:
                writer.write_table(batch.select(p.schema.names).cast(p.schema))
                rows += batch.num_rows
                bar.update(batch.num_rows)
    except OSError as exc:  # what filesystems raise (s3fs and others map their errors to it)
        raise RaycacheError(
            f"writing {p.cfg.output!r} failed ({type(exc).__name__}: {exc}); nothing was "
            "written there. Check that the output's folder is writable, then run again") from exc
    finally:
        bar.close()
    return rows
