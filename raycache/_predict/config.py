"""PREDICT's settings: the checkpoint, the input and output files, and the actor pool."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any

from raycache._compute.pool_config import PoolConfig, gather_pool_keys
from raycache._core.config import AUTO
from raycache._core.renamed import renamed_argument, renamed_keys
from raycache._core.trust import problems as trust_problems
from raycache._source.config import FILE_FORMATS

__all__ = ["AUTO_IN_PROCESS_BYTES", "RENAMED", "ROWS_PER_CALL", "PredictConfig"]

AUTO_IN_PROCESS_BYTES = 4 << 20
"""in_process: auto runs a CPU job on JSONL or CSV files (whose row count is unknown until
read) of at most this many bytes without Ray; Parquet is judged by rows, as fill does."""
ROWS_PER_CALL = 1024
"""pool.block_rows auto for a predict: rows per call of a predict actor (Ray Data's batch)."""
RENAMED = {"keep": "passthrough"}
"""Old setting -> its name now: the old one still loads, with a DeprecationWarning."""


@dataclass
class PredictConfig:
    """A predict run: the head's checkpoint, the input file, the Parquet output, the pool.

    `raycache.predict_file` takes this, or the same as a dict or a YAML file.

    Example:
        ```python
        cfg = raycache.PredictConfig(checkpoint=run.checkpoint, input="new.jsonl",
                                     output="predictions.parquet", overwrite=True)
        raycache.predict_file(cfg)
        ```
    """

    checkpoint: str
    """A head checkpoint folder (TrainResult.checkpoint): a path or any fsspec URI."""
    input: str | list[str]
    """Parquet, JSONL or CSV: a file, folder or glob (or a list of them), local or any fsspec
    URI. It needs the input column of each of the head's encoders."""
    output: str
    """The Parquet file to write (a path or any fsspec URI); it appears whole or not at all."""
    passthrough: list[str] | None = None
    """Input columns copied to the output unchanged (default: the cache's key column when the
    input has it, else every column that is not an encoder input). Its old name, `keep`,
    still loads, with a DeprecationWarning, until 0.3."""
    overwrite: bool = False
    """Replace an existing output file (otherwise refused)."""
    format: str | None = None
    """parquet, jsonl or csv; inferred from the input's suffix when left out."""
    options: dict[str, Any] = field(default_factory=dict)
    """fsspec storage options for the checkpoint, the input and the output."""
    trust_code: bool | list[str] = False
    """Let the checkpoint's head.json name code to run (a head family or an encoder's factory,
    "module:function"): true for any, or a list of allowed prefixes ([mypkg.]); false: only
    registered kinds, and what this process's own configs named (raycache.load_head)."""
    pool: PoolConfig = field(default_factory=PoolConfig)
    """The predict actor pool: actors, CPUs and GPUs each, batching, and rows per actor call
    (`block_rows`; auto: 1,024). The flat keys of configs written before the group
    (`num_gpus: 1`, `rows_per_batch: 4096`) still load."""
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
    keep: InitVar[list[str] | None] = None
    """The old name of `passthrough` (a DeprecationWarning; it goes in 0.3)."""

    def __post_init__(self, keep: list[str] | None) -> None:
        self.passthrough = renamed_argument("keep", keep, "passthrough", self.passthrough,
                                            "PredictConfig")

    @staticmethod
    def moved(data: dict[str, Any]) -> dict[str, Any]:
        """The settings of an older layout moved to where they live now: the pool's flat keys
        (`num_gpus: 1`) into `pool:`, `rows_per_batch` as `pool.block_rows`, and `keep` (a
        DeprecationWarning) as `passthrough`.

        Args:
            data: the config as a mapping, as written.

        Returns:
            The mapping with the pool's settings under `pool`.
        """
        data = renamed_keys(data, RENAMED, "PredictConfig")
        if isinstance(data, dict) and "rows_per_batch" in data and "block_rows" not in data:
            data = {**data, "block_rows": data["rows_per_batch"]}
            del data["rows_per_batch"]
        return gather_pool_keys(data)

    def problems(self) -> list[str]:
        """Local checks; the head, the input's columns and the output's place are checked
        where a predict run is planned.

        Returns:
            One line per problem, naming the field, the value and what is expected; empty
            when there is none.

        Example:
            ```python
            problems = cfg.problems()  # [] for a config a predict run can plan
            ```
        """
        out = trust_problems(self.trust_code)
        if self.format not in (None, *FILE_FORMATS):
            out.append(f"format={self.format!r}: expected one of {FILE_FORMATS}")
        if self.in_process not in (True, False, AUTO):
            out.append(f"in_process={self.in_process!r}: expected true, false or 'auto'")
        elif self.in_process is True and self.pool.num_gpus not in (0, AUTO):
            out.append("in_process=true runs no Ray actors, so pool.num_gpus does not apply; "
                       "set pool.num_gpus: 0, or in_process: auto to predict on GPU actors")
        return out
