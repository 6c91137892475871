"""A training run planned on the driver: the config checked against the registries it names
(heads, optimizers, schedules, objectives, the sweep) and against the cache, and the WorkerSpec
built once from both; no Ray."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
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
from raycache._fit.part import keeps
from raycache._heads import HEADS
from raycache._heads.linear_start import starts_linear
from raycache._heads.specs import HeadSpec, standardizes
from raycache._train.config import TrainConfig
from raycache._train.defaults import feature_l1, resolve_solver
from raycache._train.driver.columns import Columns
from raycache._train.driver.placement import cluster, resolve_placement, resolve_workers
from raycache._train.folder.record import read_record, runs_dir
from raycache._train.objectives import OBJECTIVES
from raycache._train.runspec import Member, Recipe, WorkerSpec, digest, sweep_record
from raycache._train.sweep.grid import apply, members

__all__ = ["check", "cluster", "config_problems", "guard_run_folder", "overlap_problems",
           "load_config", "prepare", "problems", "resolve_views"]


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
    if not read.overlap and not m.rows:
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


def trainable_encoders(cfg: TrainConfig, cache: Cache, encoders: list[str]) -> dict[str, int]:
    """The trainable encoders among `encoders`, with their output widths (checked: what
    training them needs)."""
    from raycache._heads.joint import output_dim

    m = cache.manifest
    names = [e for e in encoders if m.encoder(e).trainable]
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
            if not read.overlap and stats["max"] >= max(10 * m.rows, 2**20):  # a bincount that big
                raise ConfigError([
                    f"label column {label!r} holds ids up to {stats['max']} over {m.rows} rows; "
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
    rows = len(read(key)) if read.overlap else cache.manifest.rows
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


def class_weights(cfg: TrainConfig, counts: np.ndarray) -> tuple[float, ...] | None:
    if cfg.loss.class_weights == "balanced":
        return tuple(float(counts.sum() / (len(counts) * max(c, 1))) for c in counts)
    return tuple(float(w) for w in cfg.loss.class_weights) if cfg.loss.class_weights else None


def sweep_members(cfg: TrainConfig, head: HeadSpec, rows: int | None = None,
                  workers: int = 0, l1: float | None = None) -> tuple[Member, ...]:
    """The sweep's members, each with its own head and recipe (none without a sweep; auto
    settings resolved for each member's head, as in Recipe.from_config)."""
    out = []
    for settings in members(cfg):
        c = apply(cfg, settings)
        out.append(Member(
            settings=tuple((k, tuple(v) if isinstance(v, list) else v)
                           for k, v in settings.items()),
            head=dataclasses.replace(head, head=c.head, hidden=tuple(c.hidden),
                                     dropout=c.dropout,
                                     standardize=standardizes(c.head, bool(head.trainable)),
                                     linear_start=starts_linear(
                                         c.head, c.objective, head.num_classes, c.hidden,
                                         bool(head.trainable))),
            recipe=Recipe.from_config(c, rows, workers, l1)))
    return tuple(out)


def selection(cfg: TrainConfig, recipe: Recipe) -> tuple[str, str]:
    """(metric, mode) that picks a sweep's best member: `select`, else the monitor's."""
    if cfg.select is None:
        ev = recipe.evaluation
        return ev.monitor, (ev.mode if cfg.select_mode == "auto" else cfg.select_mode)
    if cfg.select_mode != "auto":
        return cfg.select, cfg.select_mode
    return cfg.select, "min" if cfg.select.endswith("loss") else "max"


def resolve_views(cfg: TrainConfig, cache: Cache, head: HeadSpec) -> tuple[int, tuple[str, ...]]:
    """(K, encoders) of the views the run trains on: auto uses them when the cache has views
    of the head's encoders and the objective reads the cache's rows itself; (0, ()) for none."""
    views = cache.manifest.extra.get("views")
    have = tuple(e for e in head.encoders if views and e in views["encoders"])
    if cfg.views is False:
        return 0, ()
    own = OBJECTIVES[cfg.objective].data_sources is not None
    if cfg.views is True and (not have or own):
        why = (f"objective {cfg.objective!r} reads its own rows (pairs), without views" if own
               else f"cache {cache.name}/{cache.fingerprint[:12]} has no views of "
                    f"{list(head.encoders)}")
        raise ConfigError([f"views=true: {why}; fill the cache with `views:` set, or set "
                           "views: auto or false"])
    return (int(views["count"]), have) if have and not own else (0, ())


def run_name(cfg: TrainConfig, head: HeadSpec, recipe: Recipe,
             sweep: dict[str, Any] | None = None, views: int = 0) -> str:
    """The user's run_name, or one derived from the config (the same config, the same run)."""
    if cfg.run_name:
        return cfg.run_name
    family = "sweep" if sweep else "".join(c if c.isalnum() or c in "-_" else "-"
                                           for c in head.head)
    name = f"{family}-{digest(head, recipe, sweep, views)[:12]}"
    return name if cfg.resume else f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def prepare(cfg: TrainConfig, checked: tuple | None = None, rows: int | None = None,
            overlap: bool = False) -> tuple[Cache, WorkerSpec]:
    """Everything checked and resolved, and the WorkerSpec built (Ray is joined only where an auto
    choice needs the cluster; `checked` is check()'s result when the caller already ran it;
    `rows`, the cache's rows where its manifest does not list them yet; `overlap`: the run
    trains on a fill as it lands)."""
    if checked is None:
        store = Store.from_config(cfg.store)
        store.check_reachable()
        checked = check(cfg, store)
    cache, head, counts = checked
    store = cache.store
    rows = cache.manifest.rows if rows is None else rows
    workers, why = resolve_workers(cfg, head, rows)
    l1 = feature_l1(cache, head.encoders) if not head.trainable else None
    recipe = Recipe.from_config(cfg, rows, workers, l1)
    select, select_mode = selection(cfg, recipe)
    sweep = sweep_members(cfg, head, rows, workers, l1)
    views, view_encoders = resolve_views(cfg, cache, head)
    held = rows * (1 + views)  # in memory, a row with views takes K + 1 rows of features
    placement = resolve_placement(cfg, head, held, workers)
    recipe = resolve_solver(cfg, recipe, head, rows, workers, placement, views, overlap)
    name = run_name(cfg, head, recipe, sweep_record(sweep, select, select_mode), views)
    spec = WorkerSpec.of(
        head=head, recipe=recipe, run_name=name, key=cache.manifest.key_column, rows=rows,
        placement=placement, num_workers=workers,
        use_gpu=cfg.resources.use_gpu, class_weights=class_weights(cfg, counts), store=store,
        shards=tuple((p, s.rows) for p, s in zip(cache.shard_paths(), cache.manifest.shards,
                                                  strict=True)),
        checks=tuple((s.bytes, s.sha256) for s in cache.manifest.shards) if cfg.verify else (),
        keeps=keeps(cache.manifest.shards),
        run_dir=f"{runs_dir(cache)}/{name}", checkpoint_every=cfg.checkpoints.every,
        checkpoint_seconds=cfg.checkpoints.seconds, prefetch_batches=cfg.resources.prefetch_batches,
        progress=cfg.progress, sweep=sweep, select=select, select_mode=select_mode,
        views=views, view_encoders=view_encoders, why=why, tracking=tuple(cfg.tracking),
    )
    guard_run_folder(cfg, spec, read_record(spec.store, spec.run_dir))
    return cache, spec


def guard_run_folder(cfg: TrainConfig, spec: WorkerSpec, record: dict[str, Any] | None
                     ) -> None:
    """Never train over another run: the folder must be empty (`record`, its run.json: None), or
    hold this config's run."""
    if record is None:
        return
    if record.get("digest") != spec.digest():
        raise ConfigError([
            f"run_name={spec.run_name!r} already holds a run of a different config (digest "
            f"{record.get('digest', '?')[:12]}, this one {spec.digest()[:12]}); choose another "
            "run_name, or leave it out to derive one from the config"])
    if not cfg.resume:
        raise ConfigError([f"run_name={spec.run_name!r} already holds a run and resume is "
                           "false; choose another run_name, or set resume: true to continue"])
