"""The training settings left `auto`, decided from the run: the learning rate per head family
(a linear classifier's from the size of its features), the batch size from the rows, and
`epochs: auto` (early stopping on a plateau, between a minimum and a cap). bench/defaults.py is
the evidence (README, "Defaults that learn well")."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from raycache._core.config import AUTO
from raycache._train.config import TrainConfig

if TYPE_CHECKING:
    from raycache._cache.committed import Cache

__all__ = ["BATCH_RANGE", "BATCH_STEPS", "DEFAULT_LR", "LINEAR_STEP", "LINEAR_LR", "LR",
           "SAMPLE_ROWS", "feature_l1", "resolve", "resolve_lr"]

LR: dict[tuple[str, str], float] = {("classification", "mlp"): 3e-3}
"""(objective, head family) -> AdamW's peak learning rate; the others take DEFAULT_LR, and a
linear classifier takes LINEAR_STEP over its features' mean L1 norm."""
DEFAULT_LR = 1e-3
"""Deeper heads' and the similarity objectives' rate (the rate of raycache before `auto`)."""
LINEAR_STEP = 0.75
"""A linear classifier's rate x its features' mean L1 norm: AdamW moves every weight by about
the rate each step, so a row's logits move by about rate x |x|_1. The best rate of the bench's
sets gave 0.5-2 on L2-normalised text embeddings (|x|_1 ~ 16), tanh projections (~200) and
image features (~70); above ~1, batches of 32 rows made validation noisy enough to stop early."""
LINEAR_LR = 1e-2
"""A linear classifier's rate where its features' size is unknown (no shard to sample yet)."""
SAMPLE_ROWS = 2048
"""Rows of the cache read to measure the features' size."""
BATCH_STEPS = 50
"""batch_size: auto gives an epoch about this many optimizer steps..."""
BATCH_RANGE = (32, 256)
"""...within these bounds (rows per worker and step)."""


def resolve_lr(cfg: TrainConfig, l1: float | None = None) -> float:
    """optim.lr: auto for this config's head and objective (`l1`: the features' mean L1 norm,
    feature_l1; None where unknown)."""
    if cfg.optim.lr != AUTO:
        return float(cfg.optim.lr)
    if (cfg.objective, cfg.head) == ("classification", "linear"):
        return float(f"{LINEAR_STEP / l1:.3g}") if l1 else LINEAR_LR
    return LR.get((cfg.objective, cfg.head), DEFAULT_LR)


def feature_l1(cache: Cache, encoders: tuple[str, ...]) -> float | None:
    """The mean L1 norm of the head's input (its cached encoders' columns side by side) over
    the cache's first SAMPLE_ROWS rows; None for a cache with no rows yet."""
    if not cache.manifest.shards or not encoders:
        return None
    table = cache.read_table(list(encoders), limit=SAMPLE_ROWS, verify=False)
    if not table.num_rows:
        return None
    total = 0.0
    for name in encoders:  # non-finite values (a cache an older raycache filled) left out
        column = table.column(name).combine_chunks()
        values = np.abs(column.flatten().to_numpy(zero_copy_only=False).astype(np.float64))
        total += float(values[np.isfinite(values)].sum())
    return total / table.num_rows


def resolve(cfg: TrainConfig, rows: int | None, workers: int) -> TrainConfig:
    """`cfg` with loop.batch_size, loop.epochs and evaluation.early_stopping decided (lr stays
    for each sweep member's head: resolve_lr). `rows`: the cache's rows, of which the
    validation fraction is held out; `workers`: DDP workers (0 in-process)."""
    loop, ev = cfg.loop, cfg.evaluation
    if loop.batch_size == AUTO and rows is None:
        loop = dataclasses.replace(loop, batch_size=BATCH_RANGE[1])
    elif loop.batch_size == AUTO:
        train_rows = rows * (1 - ev.val_fraction) / max(workers, 1)
        low, high = BATCH_RANGE
        loop = dataclasses.replace(loop, batch_size=int(min(max(
            2 ** round(math.log2(max(train_rows / BATCH_STEPS, 1))), low), high)))
    auto = loop.epochs == AUTO  # min_epochs and max_epochs are settings of auto epochs only
    loop = dataclasses.replace(loop, epochs=loop.max_epochs if auto else loop.epochs,
                               min_epochs=loop.min_epochs if auto else 1,
                               max_epochs=loop.max_epochs if auto else loop.epochs)
    if ev.early_stopping == AUTO:
        ev = dataclasses.replace(ev, early_stopping=auto)
    return dataclasses.replace(cfg, loop=loop, evaluation=ev)
