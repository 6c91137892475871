"""A train config checked on the driver: against the registries it names (heads, optimizers,
schedules, objectives, the sweep) and against the cache it trains on, each label column read
once; no Ray."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from raycache._cache.committed import Cache
from raycache._cache.finding import open_cache
from raycache._cache.store import Store
from raycache._core.caller import warn
from raycache._core.config import load, walk_problems
from raycache._core.trust import Trust
from raycache._encoders.config import EncoderConfig
from raycache._encoders.trusted import check_encoders
from raycache._errors import ConfigError
from raycache._heads import HEADS
from raycache._heads.linear_start import starts_linear
from raycache._heads.specs import HeadSpec, standardizes
from raycache._train.config import TrainConfig
from raycache._train.driver.columns import Columns
from raycache._train.objectives import OBJECTIVES

__all__ = ["check", "class_counts", "config_problems", "load_config", "overlap_problems",
           "problems", "split_problems", "trainable_encoders", "trained_encoders"]


def problems(cfg: TrainConfig) -> list[str]:
    """The checks of `cfg` that consult the registries, a sweep's members included."""
    from raycache._train.objectives import OBJECTIVES, metric_problems
    from raycache._train.optim import OPTIMIZERS, SCHEDULES
    from raycache._train.sweep.grid import problems as sweep_problems

    out = []
    if cfg.head not in HEADS and ":" not in cfg.head:
        out.append(f"head={cfg.head!r}: unknown; expected one of {sorted(HEADS)} "
                   "or 'package.module:function'")
    if cfg.optim.optimizer not in OPTIMIZERS:
        out.append(f"optim.optimizer={cfg.optim.optimizer!r}: expected one of "
                   f"{sorted(OPTIMIZERS)}")
    if cfg.schedule.kind not in SCHEDULES:
        out.append(f"schedule.kind={cfg.schedule.kind!r}: expected one of {sorted(SCHEDULES)}")
    if cfg.objective not in OBJECTIVES:
        out.append(f"objective={cfg.objective!r}: unknown; expected one of "
                   f"{sorted(OBJECTIVES)}")
    else:
        out += OBJECTIVES[cfg.objective].problems(cfg)
        out += metric_problems(cfg)  # monitor and select
    return out + sweep_problems(cfg, config_problems)



def config_problems(cfg: TrainConfig) -> list[str]:
    """Every problem of `cfg`: its local checks and those against the registries."""
    return walk_problems(cfg) + problems(cfg)


def overlap_problems(cfg: TrainConfig) -> list[str]:
    """What keeps a train config from overlapping with its fill (checked before any work)."""
    out = []
    family = OBJECTIVES[cfg.objective]
    if family.data_sources is not None or family.labels == "none":
        out.append(f"overlap: true needs an objective that trains on the cache's own rows and "
                   f"labels; objective {cfg.objective!r} reads other data. Set overlap: false")
    return out


def load_config(data: TrainConfig | dict[str, Any] | str | Path) -> TrainConfig:
    """A TrainConfig from a dict, a YAML path or an instance, every problem in one ConfigError
    (`tracking:` checked once, not per sweep member)."""
    from raycache._train.tracking.configured import problems as tracking

    return load(TrainConfig, data, problems, lambda cfg: tracking(cfg.tracking))


def check(cfg: TrainConfig, store: Store, cache: Cache | None = None,
          column: Callable[[str], Any] | None = None) -> tuple[Cache, HeadSpec, np.ndarray]:
    """Check the config against the cache (a fill under way: `cache` with no shards yet, and
    `column` reads a label column from its source); the head's spec and the class counts.
    Each column the checks need is read once (Columns)."""
    cache = cache or open_cache(cfg.cache, store, cfg.fingerprint)
    m, read = cache.manifest, Columns(cache, column)
    if not read.rows:
        raise ConfigError([f"cache {m.name}/{m.fingerprint[:12]} holds no rows: nothing to train "
                           "on. Fill it again from a source that has rows"])
    problems = []
    have = [e.name for e in m.encoders]
    encoders = cfg.encoders or have
    problems += [f"encoders: {e!r} is not in cache {m.name}/{m.fingerprint}; it holds {have}"
                 for e in encoders if e not in have]
    family = OBJECTIVES[cfg.objective]
    if family.data_problems is not None:
        problems += family.data_problems(cfg, cache)
    if family.labels == "none":  # the objective reads no label column
        if problems:
            raise ConfigError(problems)
        label, counts, names = "", np.zeros(0, dtype=np.int64), ()
    else:
        label, counts, names = class_counts(cfg, cache, problems, read)
    if family.data_sources is None:  # the objective trains on the cache's rows, split by key
        split_problems(cfg, cache, read)
    classes = len(counts)
    saved = m.extra.get("encoder_configs", {})
    trainable = trainable_encoders(cfg, cache, encoders)
    head = HeadSpec(
        head=cfg.head, in_dim=sum(m.encoder(e).dim for e in encoders if e not in trainable)
        + sum(trainable.values()),
        num_classes=classes, hidden=tuple(cfg.hidden), dropout=cfg.dropout,
        objective=cfg.objective, out_dim=family.out_dim(cfg, classes),
        normalize=cfg.normalize,
        encoders=tuple(encoders), label=label, cache=m.name, fingerprint=m.fingerprint,
        encoder_configs={e: saved[e] for e in encoders if e in saved},
        weights_digests={e: m.encoder(e).weights_digest for e in encoders
                         if e not in trainable},
        trainable=tuple(trainable), class_names=names,
        standardize=standardizes(cfg.head, bool(trainable)),
        linear_start=starts_linear(cfg.head, cfg.objective, classes, cfg.hidden, bool(trainable)),
    )
    return cache, head, counts


def trained_encoders(cfg: TrainConfig, cache: Cache) -> list[str]:
    """The cache's trainable encoders that the run reads (`encoders:`, else all), in its order;
    names the cache lacks left out (check names them)."""
    by_name = {e.name: e for e in cache.manifest.encoders}
    return [e for e in cfg.encoders or list(by_name) if e in by_name and by_name[e].trainable]


def trainable_encoders(cfg: TrainConfig, cache: Cache, encoders: list[str]) -> dict[str, int]:
    """The trainable encoders among `encoders`, with their output widths (checked: what
    training them needs)."""
    from raycache._heads.joint import output_dim

    m = cache.manifest
    names = [e for e in trained_encoders(cfg, cache) if e in encoders]
    problems = []
    if cfg.optim.encoder_lr is not None and not names:
        problems.append(f"encoder_lr={cfg.optim.encoder_lr}: cache {m.name} has no trainable "
                        "encoder "
                        f"among {encoders}; leave encoder_lr out, or fill with trainable: true")
    if names and cfg.sweep:
        problems.append(f"sweep: trainable encoders {names} train one head per run; train "
                        "each setting as its own run, or leave the trainable encoders out "
                        "with `encoders:`")
    if names and m.extra.get("views") and cfg.views is not False:
        problems.append(f"views: cache {m.name} holds augmentation views, which do not train "
                        f"with the trainable encoders {names} yet; set views: false, or leave "
                        "the trainable encoders out with `encoders:`")
    if names and OBJECTIVES[cfg.objective].data_sources is not None:
        problems.append(f"objective={cfg.objective!r} reads its own batches and cannot train "
                        f"the trainable encoders {names}; leave them out with `encoders:`")
    if problems:
        raise ConfigError(problems)
    saved = m.extra.get("encoder_configs", {})
    check_encoders({n: saved[n] for n in names if n in saved}, Trust.of(cfg.trust_code),
                   f"{m.name}/{m.fingerprint} manifest.json: encoder_configs")
    out = {}
    for name in names:
        out[name] = m.encoder(name).dim
        if not out[name]:  # the torch family's width shows only when it runs
            column = m.encoder(name).column
            sample = cache.read_table([column], limit=2, verify=False).column(column)
            out[name] = output_dim(EncoderConfig(**saved[name]), sample)
    return out


def class_counts(cfg: TrainConfig, cache: Cache, problems: list[str], read: Columns
                 ) -> tuple[str, np.ndarray, tuple[str, ...]]:
    """The label column, its class counts and, for a named label, its class names (sorted),
    checked (with the problems found so far; `read` reads a column where the manifest's
    label_stats do not tell)."""
    from raycache._cache.labels import MAX_NAMED, named
    from raycache._fill.keys import label_stats

    m, family = cache.manifest, OBJECTIVES[cfg.objective]
    label = cfg.label or (m.label_columns[0] if m.label_columns else None)
    names = False
    if label is None:
        problems.append(f"cache {m.name} has no label column; fill it with source.labels set")
    elif label not in m.label_columns:
        problems.append(f"label={label!r} is not cached; the cache holds {m.label_columns}")
    else:
        kind = m.label_types[label]
        names = named(kind)
        if not kind.startswith(("int", "uint")) and not names:
            ids = "group" if family.labels == "groups" else "class"
            problems.append(
                f"label column {label!r} holds {kind} values; objective {cfg.objective!r} "
                f"needs integer {ids} ids 0..K-1 or {ids} names (strings). Map the labels to "
                "integers or names in the source and fill again, or name another label column "
                "with `label:`")
    if problems:
        raise ConfigError(problems)
    stats = m.label_stats.get(label)
    if stats is None or (names and "classes" not in stats):
        stats = label_stats(read(label)) if names else _label_stats(label, read)
    if stats["nulls"]:
        raise ConfigError([_null_labels(cache, label, stats["nulls"], read)])
    if names:
        if "classes" not in stats:
            raise ConfigError([f"label column {label!r} has more than {MAX_NAMED:,} distinct "
                               "names; a classifier needs fewer classes (or integer ids)"])
        classes = tuple(stats["classes"])
    else:
        classes = ()
        low = stats["min"]
        if low is None or low < 0:
            raise ConfigError([f"label column {label!r}: smallest class id is {low}; expected "
                               ">= 0"])
        if "counts" not in stats:
            if stats["max"] >= max(10 * read.rows, 2**20):  # a bincount that big
                raise ConfigError([
                    f"label column {label!r} holds ids up to {stats['max']} over {read.rows} rows; "
                    f"objective {cfg.objective!r} needs ids 0..K-1, and would build a head of "
                    f"{stats['max'] + 1} outputs. Map the labels to 0..K-1 and fill again"])
            stats = _label_stats(label, read)
    counts = np.asarray(stats["counts"], dtype=np.int64)
    if np.count_nonzero(counts) < 2:
        ids = "group" if family.labels == "groups" else "class"
        raise ConfigError([
            f"label column {label!r} holds one {ids} id only "
            f"({np.flatnonzero(counts).tolist()}); objective {cfg.objective!r} needs at least "
            f"2 (a head of one {ids} learns nothing, yet scores an accuracy of 1.0). Fill the "
            f"cache from rows of two or more {ids}{'es' if ids == 'class' else 's'}, or name "
            "another label column with `label:`"])
    if family.labels == "groups" and counts.max() < 2:
        raise ConfigError([f"label column {label!r}: no group holds two rows, so no row is "
                           f"similar to another and objective {cfg.objective!r} has nothing to "
                           "learn. Name a label column whose groups repeat with `label:`"])
    if not names and family.labels != "groups" and (empty := np.flatnonzero(counts == 0)).size:
        warn(f"label column {label!r} holds no row of class id(s) "
             f"{empty[:10].tolist()} (ids run 0..{len(counts) - 1}): the head has "
             f"{empty.size} class(es) it never sees, and predicts none of them. Map "
             "the labels to 0..K-1 (or names) in the source and fill again")
    high, weights = len(counts) - 1, cfg.loss.class_weights
    if isinstance(weights, list) and len(weights) != len(counts):
        raise ConfigError([f"class_weights has {len(weights)} values; the label "
                           f"{label!r} has {len(counts)} classes (0..{high}): give one each"])
    if isinstance(weights, list) and not any(w for w, n in zip(weights, counts, strict=True)
                                             if n):
        raise ConfigError([f"loss.class_weights={weights}: every class the label {label!r} "
                           "holds weighs 0, so the loss is 0/0 (NaN); give them weights > 0"])
    return label, counts, classes


def _null_labels(cache: Cache, label: str, nulls: int, read: Columns) -> str:
    """The problem of a label column with null values: how many, a few of their keys, the fix."""
    key = cache.manifest.key_column
    keys = pc.filter(read(key), pc.is_null(read(label))).slice(0, 3).to_pylist()
    return (f"label column {label!r} is null in {nulls} row(s) (keys {keys}"
            f"{', ...' if nulls > len(keys) else ''}); a classifier needs a label on every row. "
            "Fill those labels (or drop the rows) in the source and fill again, or name another "
            "label column with `label:`")


def split_problems(cfg: TrainConfig, cache: Cache, read: Columns) -> None:
    """A ConfigError where evaluation.val_fraction leaves no training or no validation rows
    (the split is by a hash of each key, so small caches are counted key by key)."""
    from raycache._fit.split import sides

    key, fraction = cache.manifest.key_column, cfg.evaluation.val_fraction
    rows = read.rows
    found = sides(rows, fraction, lambda: read(key))
    if found is None or all(found):
        return
    train, held = found
    side = "validation" if not held else "training"
    fix = "raise it, e.g. 0.2" if not held else "lower it, e.g. 0.2"
    raise ConfigError([
        f"evaluation.val_fraction={fraction}: leaves {train} of the {rows} rows of cache "
        f"{cache.name} for training and {held} for validation (split by a hash of each key); "
        f"with no {side} rows a run reports {side} metrics of 0 and picks them as best. "
        f"{fix.capitalize()}, or fill more rows"])


def _label_stats(label: str, read: Columns) -> dict[str, Any]:
    """What the manifest's label_stats holds (caches before format 3 lack it, and a fill still
    running has none), from the label column."""
    labels = read(label)
    low, high = pc.min(labels).as_py(), pc.max(labels).as_py()
    out = {"nulls": labels.null_count, "min": low, "max": high}
    if not labels.null_count and low is not None and low >= 0:
        out["counts"] = np.bincount(labels.to_numpy(), minlength=int(high) + 1).tolist()
    return out
