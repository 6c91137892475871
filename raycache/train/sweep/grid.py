"""A `sweep:` of a TrainConfig: the settings it may vary, its checks, and its members (the
cartesian product of the values, each a complete config)."""

from __future__ import annotations

import dataclasses
import itertools
import typing
from collections.abc import Callable
from typing import Any

from raycache.core.config import parse_value
from raycache.train.config import GroupsConfig, TrainConfig

__all__ = ["KEYS", "MAX_MEMBERS", "apply", "members", "problems"]

KEYS: dict[str, str] = {
    "lr": "peak learning rate, e.g. [1e-3, 3e-3]",
    "weight_decay": "e.g. [0.0, 0.01]",
    "momentum": "sgd and rmsprop momentum, e.g. [0.0, 0.9]",
    "label_smoothing": "classification, e.g. [0.0, 0.1]",
    "head": "head families, e.g. [linear, mlp]",
    "hidden": "hidden widths per head, e.g. [[256], [512]]",
    "dropout": "e.g. [0.0, 0.1]",
    "groups.loss": "objective groups: losses, e.g. [triplet, infonce]",
    "groups.miner": "objective groups: miners, e.g. [none, hard]",
    "groups.margin": "objective groups: margins, e.g. [0.1, 0.2]",
    "groups.scale": "objective groups: scales, e.g. [10, 20]",
}
"""Settings a sweep may vary, with what each takes. The rest (epochs, batch size, seed, ...)
must be shared: every member trains on the same batches."""
MAX_MEMBERS = 256


def _type(key: str) -> Any:
    owner, _, name = key.rpartition(".")
    return typing.get_type_hints(GroupsConfig if owner else TrainConfig)[name]


def apply(cfg: TrainConfig, settings: dict[str, Any]) -> TrainConfig:
    """The config of one member: `cfg` with these settings, and no sweep."""
    top = {k: v for k, v in settings.items() if "." not in k}
    groups = {k.split(".", 1)[1]: v for k, v in settings.items() if "." in k}
    return dataclasses.replace(cfg, sweep={}, groups=dataclasses.replace(cfg.groups, **groups),
                               **top)


def members(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Every combination of the sweep's values, in a stable order (the first key slowest);
    none without a sweep."""
    if not cfg.sweep:
        return []
    keys = list(cfg.sweep)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(cfg.sweep[k] for k in keys))]


def problems(cfg: TrainConfig, check: Callable[[TrainConfig], list[str]]) -> list[str]:
    """Unknown settings, empty or ill-typed value lists, and each member's problems by
    `check` (a whole config's checks, passed in by train.plan)."""
    if not cfg.sweep:
        return []
    out = []
    for key, values in cfg.sweep.items():
        if key not in KEYS:
            out.append(f"sweep.{key}: not a setting a sweep can vary; expected one of "
                       f"{sorted(KEYS)} (settings like epochs or batch_size are shared by "
                       "every member)")
        elif not isinstance(values, list) or not values:
            out.append(f"sweep.{key}={values!r}: expected a non-empty list of values to try, "
                       f"{KEYS[key]}")
        else:
            for i, v in enumerate(values):
                parse_value(_type(key), v, f"sweep.{key}[{i}]", out)
    if out:
        return out
    count = len(members(cfg))
    if count > MAX_MEMBERS:
        return [f"sweep: {count} combinations; at most {MAX_MEMBERS} heads train in one pass. "
                "Try fewer values, or split the sweep into several runs"]
    for settings in members(cfg):
        for problem in check(apply(cfg, settings)):
            line = f"sweep member {settings}: {problem}"
            if line not in out:
                out.append(line)
    return out
