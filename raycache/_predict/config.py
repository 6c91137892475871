"""PREDICT's settings: the checkpoint, the input and output files, and the actor pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._core.config import AUTO
from raycache._source.config import FILE_FORMATS

__all__ = ["AUTO_IN_PROCESS_BYTES", "PredictConfig"]

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
    """Run the same stages in this process, without Ray. auto: decided as a fill's
    (raycache._compute.where), JSONL/CSV of at most 4 MiB counting as small; num_gpus auto
    goes to GPU actors where the cluster (or, with none, this machine) has a GPU."""
    progress: bool = True
    """Show a progress bar (rows) and the summary."""
    verbose: bool = False
    """Show Ray's and Ray Data's own logs and progress bars too."""

    def problems(self) -> list[str]:
        out = []
        if self.format not in (None, *FILE_FORMATS):
            out.append(f"format={self.format!r}: expected one of {FILE_FORMATS}")
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
