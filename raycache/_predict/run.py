"""PREDICT: run a trained head (its frozen encoders live, then the head) over a file with Ray
Data (read -> prepare -> an actor pool that loads the head once per actor), or for a small CPU
job the same stages in this process, and write the outputs as one Parquet file, atomically."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from raycache._cache.store import Store
from raycache._compute import runner, where
from raycache._compute.pool import Pool
from raycache._compute.runner import Job, Stage
from raycache._core.config import AUTO, load
from raycache._core.secrets import seal
from raycache._core.trust import Trust
from raycache._errors import ConfigError, RaycacheError
from raycache._predict.config import AUTO_IN_PROCESS_BYTES, ROWS_PER_CALL, PredictConfig
from raycache._source import files as sources
from raycache._source.config import SourceConfig

if TYPE_CHECKING:
    from raycache._heads.loaded import Head

__all__ = ["AUTO_IN_PROCESS_BYTES", "PredictConfig", "PredictPlan", "PredictResult",
           "build_pipeline", "in_process", "job", "plan", "predict_file", "rows_per_call",
           "run_in_process"]


@dataclass
class PredictPlan:
    """Everything checked and decided on the driver before any work starts."""

    cfg: PredictConfig
    head: Head
    format: str
    files: list[sources.SourceFile]
    passthrough: list[str]
    """The input columns copied to the output."""
    schema: pa.Schema
    """The output's schema: the passthrough columns, then the head's output columns."""
    out: Store
    """The output file, as a Store whose root is the file."""


@dataclass
class PredictResult:
    """What a predict run wrote, and how long it took.

    Example:
        ```python
        result = raycache.predict_file({"checkpoint": run.checkpoint, "input": "new.jsonl",
                                        "output": "predictions.parquet"})
        print(result.summary())
        ```
    """

    output: str
    """The Parquet file written, as a URI."""
    rows: int
    """Rows written."""
    columns: list[str]
    """The output's columns: the passthrough input columns, then the head's outputs."""
    seconds: float
    """Wall time of the call, start-up included."""
    where: str
    """Where it ran, in words."""
    startup_seconds: float = 0.0
    """Seconds until its first rows came out: the plan, the pool's start, the model's load and
    the first batch (`first_rows`)."""
    first_rows: int = 0
    """The rows of that first batch."""

    @property
    def rows_per_second(self) -> float | None:
        """Rows per second after the first batch (start-up and the model's load left out);
        None where one batch held every row."""
        steady = self.seconds - self.startup_seconds
        return (self.rows - self.first_rows) / steady \
            if self.rows > self.first_rows and steady > 0 else None

    def summary(self) -> str:
        """What this call did, in one line.

        Returns:
            The line: rows, output, columns, seconds (and the start-up's), rows per second
            after the first batch, where it ran.
        """
        rate = self.rows_per_second
        said = (f"{rate:,.1f} rows/s after the first {self.first_rows:,} rows and "
                f"{self.startup_seconds:.1f} s of start-up (the model's load)" if rate else
                f"the model's load and start-up included: {self.startup_seconds:.1f} s to the "
                "first rows")
        return (f"predict: {self.rows} rows -> {self.output} ({', '.join(self.columns)}), "
                f"{self.seconds:.1f} s, {said}, {self.where}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (`--json`), with rows_per_second.

        Returns:
            A dict of plain values (rows_per_second: after the first batch, or None).
        """
        return {**dataclasses.asdict(self), "rows_per_second": self.rows_per_second}

    def __repr__(self) -> str:
        return f"PredictResult({self.summary()})"


def plan(cfg: PredictConfig) -> PredictPlan:
    """Load the head, check the input's columns and the output's place; no Ray, no encoding.
    The options' credentials are sealed from here on (`_core.secrets`): what Ray records of
    the read and model tasks' arguments shows them redacted."""
    from raycache._heads.loaded import load_head
    from raycache._predict.stage import OUTPUTS, output_fields

    cfg = dataclasses.replace(cfg, options=seal(cfg.options))
    head = load_head(cfg.checkpoint, trust_code=cfg.trust_code, **cfg.options)
    encoders = head.encoder_configs()
    fmt, files = sources.list_files(SourceConfig(cfg.input, cfg.format, options=cfg.options))
    schema = sources.read_schema(files[0], fmt, cfg.options)
    inputs = list(dict.fromkeys(e.input for e in encoders))
    uri = files[0].uri
    problems = [f"input column {c!r} (read by encoder {e.name!r} of the head) is not in "
                f"{uri!r}; its columns are {schema.names}. Rename the column in the input, or "
                "use a head trained on a cache of this column"
                for e in encoders for c in [e.input] if c not in schema.names]
    if cfg.passthrough is None:
        passthrough = ([head.key] if head.key in schema.names
                       else [c for c in schema.names if c not in inputs])
    else:
        passthrough = list(dict.fromkeys(cfg.passthrough))
        problems += [f"passthrough: column {c!r} is not in {uri!r}; its columns are "
                     f"{schema.names}" for c in passthrough if c not in schema.names]
    fields = output_fields(head)
    problems += [f"input column {c!r} has the name of an output column {list(OUTPUTS)}; leave "
                 "it out of passthrough (--passthrough), or rename it in the input"
                 for c in passthrough if c in {f.name for f in fields}]
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
    schema = pa.schema([schema.field(c) for c in passthrough] + fields)
    return PredictPlan(cfg, head, fmt, files, passthrough, schema, out)


def predict_file(config: PredictConfig | dict | str, *, progress: bool | None = None
                 ) -> PredictResult:
    """Run a trained head over an input file and write its outputs to one Parquet file.

    The head's frozen encoders run live, then the head; the output appears whole or not at
    all.

    Args:
        config: A PredictConfig, a dict of its fields, or a YAML file's path.
        progress: Show the progress bar and summary (None: as `config.progress` says).

    Returns:
        The output's URI, rows, columns and timings.

    Raises:
        ConfigError: Every problem of the config, the input's columns and the output's place
            (an existing output without `overwrite`), in one message.
        RaycacheError: The checkpoint is not a readable head, or the output cannot be written.
        SourceError: The input cannot be read as asked (no files, an unknown format).
        EncoderError: An encoder cannot be loaded, or cannot read an input value.
        StoreError: A store cannot be reached (StoreUnavailable: after its retries).

    Example:
        ```python
        result = raycache.predict_file({"checkpoint": run.checkpoint, "input": "new.jsonl",
                                        "output": "predictions.parquet"})
        ```
    """
    cfg = load(PredictConfig, config)
    if progress is not None:
        cfg = dataclasses.replace(cfg, progress=progress)
    start = time.perf_counter()
    p = plan(cfg)
    units, _ = sources.plan_units(p.files, p.format, cfg.options, rows_per_call(cfg))
    rows = sum(u.rows or 0 for u in units) if p.format == "parquet" else None
    local, why = in_process(cfg, rows, sum(f.size for f in p.files))
    if local:
        from raycache._compute.pool import local_pool

        pool = local_pool(cfg.pool)
    else:
        from raycache._core.extras import need

        need("ray.data", "predict on Ray (in_process: true runs it here)")
        from raycache._compute.cluster import cluster_pool

        pool = cluster_pool(cfg.pool, None if rows is None else -(-rows // rows_per_call(cfg)),
                            autoscaling=cfg.autoscaling, progress=cfg.progress,
                            verbose=cfg.verbose)
    written, first_at, first_rows = _write(p, runner.run(job(p, units), pool, local=local), rows)
    return PredictResult(p.out.url(p.out.root), written, p.schema.names,
                         time.perf_counter() - start, runner.where(pool, local, why),
                         (first_at or time.perf_counter()) - start, first_rows)


def in_process(cfg: PredictConfig, rows: int | None, size: int) -> tuple[bool, str]:
    """Whether the job runs its stages in this process, and why (see PredictConfig.in_process
    and raycache._compute.where); a JSONL or CSV input of unknown rows counts as small below
    AUTO_IN_PROCESS_BYTES."""
    if rows is None and size <= AUTO_IN_PROCESS_BYTES:
        rows = 0
    gpus = cfg.pool.num_gpus
    cpu = True if gpus == 0 else None if gpus == AUTO else False
    return where.in_process(cfg.in_process, cpu=cpu, concurrency=cfg.pool.concurrency, rows=rows)


def rows_per_call(cfg: PredictConfig) -> int:
    """Rows per call of a predict actor: pool.block_rows (auto: ROWS_PER_CALL)."""
    rows = cfg.pool.block_rows
    return ROWS_PER_CALL if rows == AUTO else int(rows)


def job(p: PredictPlan, units: list[sources.Unit]) -> Job:
    """The job for the stage runner, its output rows in input order: read units -> prepare
    (tokenise) -> predict actor pool (the head, loaded once per actor); the options sealed."""
    from raycache._predict.stage import PredictActor

    cfg, options = p.cfg, seal(p.cfg.options)
    return Job(units, p.format, options, rows_per_call(cfg), p.head.encoder_configs(),
               p.passthrough,
               model=Stage(PredictActor, dict(checkpoint=cfg.checkpoint, options=options,
                                              trust_code=Trust.of(cfg.trust_code).given())),
               ordered=True)


def run_in_process(p: PredictPlan, units: list[sources.Unit], pool: Pool) -> Iterator[pa.Table]:
    """The job's stages called in this process: the same outputs as on Ray."""
    return runner.run_local(job(p, units), pool)


def build_pipeline(p: PredictPlan, units: list[sources.Unit], pool: Pool) -> Any:
    """The job as a lazy Ray Data dataset of output rows (nothing runs until consumed)."""
    return runner.build(job(p, units), pool)


def _write(p: PredictPlan, batches: Iterator[pa.Table], total: int | None
           ) -> tuple[int, float, int]:
    """Stream the batches into the output file (whole, or nothing on an error); the rows
    written, and when (perf_counter) the first batch came and its rows."""
    rows, first_at, first_rows = 0, 0.0, 0
    try:
        with (runner.progress_bar(p.cfg.progress, total, "predict") as bar,
              p.out.open_atomic(p.out.root) as f, pq.ParquetWriter(f, p.schema) as writer):
            for batch in batches:
                writer.write_table(batch.select(p.schema.names).cast(p.schema))
                rows += batch.num_rows
                if not first_at:
                    first_at, first_rows = time.perf_counter(), batch.num_rows
                bar.update(batch.num_rows)
    except OSError as exc:  # what filesystems raise (s3fs and others map their errors to it)
        raise RaycacheError(
            f"writing {p.cfg.output!r} failed ({type(exc).__name__}: {exc}); nothing was "
            "written there. Check that the output's folder is writable, then run again") from exc
    return rows, first_at, first_rows
