"""The training settings left `auto`, decided from the run: the solver (a linear classifier
solved full batch by L-BFGS where it can be), the learning rate per head family (a linear
classifier's from the size of its features), the batch size from the rows, the monitored metric
(the one the objective reports: a classifier's val_acc), and `epochs: auto` (early stopping on
a plateau of it, between a minimum and a cap). bench/defaults.py is the evidence
(bench/README.md, "defaults.py")."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from raycache._core.config import AUTO
from raycache._errors import ConfigError
from raycache._heads.specs import HIDDEN
from raycache._train.config import ScheduleConfig, TrainConfig

if TYPE_CHECKING:
    from raycache._cache.committed import Cache
    from raycache._heads.specs import HeadSpec

__all__ = ["BATCH_RANGE", "BATCH_STEPS", "DEFAULT_LR", "DEFAULT_PATIENCE", "GRADIENT_SETTINGS",
           "HIDDEN", "LINEAR_STEP", "LINEAR_LR", "LR", "MONITOR", "PATIENCE", "SAMPLE_ROWS",
           "SOLVE_BYTES", "WIDTHS", "feature_l1", "gradient_settings", "resolve", "resolve_hidden",
           "resolve_lr", "resolve_solver"]

LR: dict[tuple[str, str], float] = {("classification", "mlp"): 1e-3}
"""(objective, head family) -> AdamW's peak learning rate; the others take DEFAULT_LR, and a
linear classifier takes LINEAR_STEP over its features' mean L1 norm. An mlp classifier starts
as the solved linear head: 1e-3 (3e-3 before bench/README.md's defaults run 6) moves it off
that start in smaller steps, and with PATIENCE's 10 epochs reaches the probe's mlp sweep."""
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
MONITOR: dict[str, str] = {"classification": "val_acc"}
"""objective -> evaluation.monitor: auto, the metric the run reports and serves by; the others
monitor val_loss. A classifier's val_loss can rise (its confidence on the rows it gets wrong)
while its accuracy still rises: stopped on val_loss, it served an epoch of lower accuracy."""
PATIENCE: dict[tuple[str, str], int] = {("classification", "mlp"): 10}
"""(objective, head family) -> evaluation.patience: auto (epochs without a better monitored
metric before early stopping); the others take DEFAULT_PATIENCE. An mlp classifier starts as
the solved linear head and, at its rate, can take more than 5 epochs of steps to beat it (on
bench/defaults.py's digits, 5 stopped it at epoch 7 with its best at 2, 0.9 point short)."""
DEFAULT_PATIENCE = 5
"""patience: auto for the other heads and objectives (the patience of raycache before auto)."""
WIDTHS = ([256], [1024])
"""hidden: auto for an mlp classifier trained alone (no sweep, no trainable encoder): both
widths train in one pass (a sweep of `hidden`, each its own optimizer and early stop, seeded as
a lone run), and the better by the monitored metric on the validation rows is served, as the
solved linear head chooses its C. The probe's mlp sweep is these widths at two rates; at the
default rate they hold its best member on bench/defaults.py's six sets (bench/README.md,
defaults.py run 7), where neither width alone did (one or two validation rows short)."""
BATCH_STEPS = 50
"""batch_size: auto gives an epoch about this many optimizer steps..."""
BATCH_RANGE = (32, 256)
"""...within these bounds (rows per worker and step)."""


def resolve_hidden(cfg: TrainConfig, trainable: bool) -> TrainConfig:
    """`cfg` with hidden: auto decided: WIDTHS as a sweep for an mlp classifier with no sweep
    of its own and, `trainable`, no trainable encoder (which trains one head a run); HIDDEN
    for any other run."""
    if cfg.hidden != AUTO:
        return cfg
    sweep = cfg.sweep
    if (cfg.objective, cfg.head) == ("classification", "mlp") and not sweep and not trainable:
        sweep = {"hidden": [list(w) for w in WIDTHS]}
    return dataclasses.replace(cfg, hidden=list(HIDDEN), sweep=sweep)


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
    """`cfg` with loop.batch_size, loop.epochs and evaluation's monitor, patience and
    early_stopping decided (lr stays for each sweep member's head: resolve_lr). `rows`: the
    cache's rows, of which the validation fraction is held out; `workers`: DDP workers (0
    in-process)."""
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
    if ev.monitor == AUTO:
        ev = dataclasses.replace(ev, monitor=MONITOR.get(cfg.objective, "val_loss"))
    if ev.patience == AUTO:
        ev = dataclasses.replace(ev, patience=PATIENCE.get((cfg.objective, cfg.head),
                                                           DEFAULT_PATIENCE))
    return dataclasses.replace(cfg, loop=loop, evaluation=ev)


GRADIENT_SETTINGS = (
    *(f"optim.{k}" for k in ("lr", "optimizer", "weight_decay", "grad_accum", "grad_clip",
                              "precision")),
    *(f"loop.{k}" for k in ("epochs", "min_epochs", "max_epochs", "batch_size", "compile")),
    *(f"schedule.{f.name}" for f in dataclasses.fields(ScheduleConfig)),
    "loss.label_smoothing", "dropout")
"""Settings of the gradient path: any of them given (away from its default) keeps solver:
auto on the gradient path."""
SOLVE_BYTES = 4 << 30
"""solver: auto solves by L-BFGS only where its working memory (a standardised copy of the
training rows and every L2 strength's logits) is under this, beside the rows themselves."""


def gradient_settings(cfg: TrainConfig) -> list[str]:
    """The settings of the gradient path `cfg` gives (those away from their defaults)."""
    out = []
    for name in GRADIENT_SETTINGS:
        group, _, key = name.rpartition(".")
        holder = getattr(cfg, group) if group else cfg
        f = next(f for f in dataclasses.fields(holder) if f.name == key)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if getattr(holder, key) != default:
            out.append(name)
    return out


def blockers(cfg: TrainConfig, head: HeadSpec, rows: int, workers: int, placement: str,
             views: int, overlap: str = "") -> list[str]:
    """Why this run cannot be solved by L-BFGS (empty: it can)."""
    from raycache._fit.logreg import GRID

    out = []
    if (cfg.objective, head.head) != ("classification", "linear"):
        out.append(f"it solves a linear classifier only (this run: head {head.head!r}, "
                   f"objective {cfg.objective!r})")
    if head.trainable:
        out.append(f"the trainable encoders {list(head.trainable)} train by gradient")
    if workers:
        out.append(f"it runs in one process, and this run has {workers} DDP workers")
    if placement == "stream":
        out.append("it needs the rows in memory, and this run streams them")
    if views:
        out.append("a cache's views are drawn per epoch, and it has no epochs")
    if cfg.sweep:
        out.append("a sweep's heads train together by gradient")
    if overlap:
        out.append(f"it needs every row, and {overlap}")
    need = rows * (1 - cfg.evaluation.val_fraction) * (
        head.in_dim + 2 * len(GRID) * max(head.num_classes, 1)) * 4
    if need > SOLVE_BYTES:
        out.append(f"its solve would need {need / 2**30:.1f} GiB beside the rows (at most "
                   f"{SOLVE_BYTES >> 30} GiB)")
    return out


def resolve_solver(cfg: TrainConfig, recipe: Any, head: HeadSpec, rows: int, workers: int,
                   placement: str, views: int, overlap: str = "") -> Any:
    """`recipe` with optim.solver decided: lbfgs (one epoch: the solve) or gradient. auto
    takes lbfgs where nothing blocks it and no gradient setting is given; lbfgs where it
    cannot be is a ConfigError that says why."""
    want = cfg.optim.solver
    if want != "gradient":
        found = blockers(cfg, head, rows, workers, placement, views, overlap)
        if want == "lbfgs" and found:
            raise ConfigError([f"optim.solver=lbfgs: {why}" for why in found] +
                              ["set optim.solver: gradient (or auto) to train this run by "
                               "epochs"])
        if want == "lbfgs" or not (found or gradient_settings(cfg)):
            loop = dataclasses.replace(recipe.loop, epochs=1, min_epochs=1, max_epochs=1)
            ev = dataclasses.replace(recipe.evaluation, early_stopping=False)
            optim = dataclasses.replace(recipe.optim, solver="lbfgs")
            return dataclasses.replace(recipe, loop=loop, evaluation=ev, optim=optim)
    return dataclasses.replace(recipe, optim=dataclasses.replace(recipe.optim,
                                                                 solver="gradient"))
