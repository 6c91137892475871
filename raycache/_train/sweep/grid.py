"""A `sweep:` of a TrainConfig: the settings it may vary, its checks, and its members (the
cartesian product of the values, each a complete config)."""

from __future__ import annotations

import dataclasses
import itertools
import types
import typing
from collections.abc import Callable
from typing import Any

from raycache._core.config import parse_value
from raycache._train.config import FLAT, TrainConfig

__all__ = ["KEYS", "MAX_MEMBERS", "apply", "dotted", "members", "problems"]



def _keys() -> dict[str, str]:
    """Every field declared sweepable (raycache._train.config.sweepable): TrainConfig's own
    (head), and those of its groups (optim.lr, groups.loss)."""
    out = {}
    for f in dataclasses.fields(TrainConfig):
        tp = typing.get_type_hints(TrainConfig)[f.name]
        if "sweep" in f.metadata:
            out[f.name] = f.metadata["sweep"]
        elif dataclasses.is_dataclass(tp):
            out.update({f"{f.name}.{g.name}": g.metadata["sweep"]
                        for g in dataclasses.fields(tp) if "sweep" in g.metadata})
    return out


KEYS: dict[str, str] = _keys()
"""Settings a sweep may vary, with what each takes. The rest (epochs, batch size, seed, ...)
must be shared: every member trains on the same batches. A grouped setting may also be named
by its flat key (lr for optim.lr)."""
MAX_MEMBERS = 256


def dotted(name: str) -> str:
    """A sweep key in its dotted spelling (lr -> optim.lr)."""
    return ".".join(FLAT[name]) if name in FLAT else name


def _type(name: str) -> Any:
    """A member's type of the setting: its field's, less the `auto` a field may take (hidden:
    a sweep lists the values to try)."""
    owner, _, field = name.rpartition(".")
    hints = typing.get_type_hints(TrainConfig)
    tp = typing.get_type_hints(hints[owner])[field] if owner else hints[field]
    if typing.get_origin(tp) is types.UnionType:
        return typing.Union[tuple(a for a in typing.get_args(tp) if a is not str)]  # noqa: UP007
    return tp


def apply(cfg: TrainConfig, settings: dict[str, Any]) -> TrainConfig:
    """The config of one member: `cfg` with these settings, and no sweep."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        owner, _, field = dotted(name).rpartition(".")
        if owner:
            nested.setdefault(owner, {})[field] = value
        else:
            top[field] = value
    groups = {owner: dataclasses.replace(getattr(cfg, owner), **kw)
              for owner, kw in nested.items()}
    return dataclasses.replace(cfg, sweep={}, **groups, **top)


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
    `check` (a whole config's checks, passed in by train.driver.plan)."""
    if not cfg.sweep:
        return []
    out = []
    for name, values in cfg.sweep.items():
        key = dotted(name)
        if key not in KEYS:
            out.append(f"sweep.{name}: not a setting a sweep can vary; expected one of "
                       f"{sorted(KEYS)} (settings like epochs or batch_size are shared by "
                       "every member)")
        elif not isinstance(values, list) or not values:
            out.append(f"sweep.{name}={values!r}: expected a non-empty list of values to try, "
                       f"{KEYS[key]}")
        else:
            for i, v in enumerate(values):
                parse_value(_type(key), v, f"sweep.{name}[{i}]", out)
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
