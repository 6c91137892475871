"""PoolConfig: the model actor pool a fill or a predict asks for, declared once with its checks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from raycache._core.config import AUTO

__all__ = ["POOL_KEYS", "PoolConfig", "gather_pool_keys"]


@dataclass
class PoolConfig:
    """How many model actors a fill or a predict runs, what each asks of Ray, and how rows are
    batched: the `pool:` group of FillConfig and PredictConfig. Every setting is `auto` by
    default, decided from the cluster the job runs on (or this machine).

    Example:
        ```python
        import raycache

        pool = raycache.PoolConfig(num_gpus=0.25, batch_size=1024)  # 4 actors a GPU
        # in a dict or YAML config: {"name": "docs", ..., "pool": {"num_gpus": 0.25}}
        ```
    """

    concurrency: int | str = AUTO
    """Model actors in the pool, or on CPUs (where the model runs as Ray Data tasks) tasks at a
    time (auto: every GPU / num_gpus where there are GPUs, else the CPU nodes' cores in actors
    of a quarter of a node's cores, 1 to 4 threads; never more actors than blocks of work)."""
    num_gpus: float | str = AUTO
    """GPUs per actor (auto: 1 where the cluster, or with no cluster this machine, has GPUs,
    else 0: CPU actors; 0.25 puts four actors on a GPU)."""
    num_cpus: float | str = AUTO
    """Logical CPUs per actor; its torch threads follow (auto: 1 beside a GPU, else a quarter
    of a node's cores, leaving 1.25 CPUs a node for reading, tokenising and writing)."""
    batch_size: int | str = AUTO
    """Rows per forward pass at most (auto: 256 on CPU, 16,384 on GPU)."""
    token_budget: int | str = AUTO
    """Padded tokens per forward pass at most, for text: rows are sorted by length and cut
    into batches under this budget (auto: 2,048 on CPU, 262,144 on GPU)."""
    block_rows: int | str = AUTO
    """Rows per Ray Data block and per actor call. A fill cuts whole shards (auto: 16,384 rows
    on CPU, 65,536 with GPUs, fewer where the fill is small so the pool gets at least 8 blocks,
    or where prepared rows are large: images, 256 MiB of uint8 pixels a block, fewer rows
    than a shard where a shard's are more); a predict takes this many rows a call (auto:
    1,024). Not part of the fingerprint."""

    def problems(self) -> list[str]:
        """The pool's own checks, each message naming the setting (the loader adds `pool.`).

        Returns:
            One message per bad value (empty when all are good).
        """
        out = []
        for name in ("concurrency", "batch_size", "token_budget", "block_rows"):
            value = getattr(self, name)
            if value != AUTO and (isinstance(value, str) or value < 1):
                out.append(f"{name}={value!r}: expected a whole number >= 1, or 'auto'")
        gpus, cpus = self.num_gpus, self.num_cpus
        if gpus != AUTO and (isinstance(gpus, str) or gpus < 0):
            out.append(f"num_gpus={gpus!r}: expected a number >= 0 (0 runs CPU actors), "
                       "or 'auto'")
        elif gpus != AUTO and gpus > 1 and gpus != int(gpus):
            out.append(f"num_gpus={gpus}: above 1 it must be a whole number of GPUs")
        if cpus != AUTO and (isinstance(cpus, str) or cpus <= 0):
            out.append(f"num_cpus={cpus!r}: expected a number > 0, or 'auto'")
        return out


POOL_KEYS = tuple(f.name for f in dataclasses.fields(PoolConfig))
"""The pool settings, which configs written before the `pool:` group give at their top level."""


def gather_pool_keys(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with each top-level pool setting (`num_gpus: 1`) moved into its group
    (`pool: {num_gpus: 1}`), so configs written before the group keep working. A setting
    given both ways is left where it is, for the loader to name."""
    if not isinstance(data, dict) or not any(k in data for k in POOL_KEYS):
        return data
    out = dict(data)
    pool = out.get("pool", {})
    if not isinstance(pool, dict):
        return data
    pool = dict(pool)
    for key in POOL_KEYS:
        if key in out and key not in pool:
            pool[key] = out.pop(key)
    out["pool"] = pool
    return out
