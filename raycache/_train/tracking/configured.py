"""`TrainConfig.tracking` read: each entry (`mlflow`, or `{kind: wandb, project: ...}`, or a
`package.module:Class` of one's own) checked against `TRACKERS` and built into its callback."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any

from raycache._core.extras import lacking
from raycache._errors import ConfigError
from raycache._train.tracking import PACKAGES, TRACKERS, TrainCallback

__all__ = ["build", "problems", "split"]


def split(entry: Any) -> tuple[str, dict[str, Any]]:
    """(kind, settings) of one entry: a bare kind, or a dict with `kind` and its settings."""
    if isinstance(entry, str):
        return entry, {}
    settings = dict(entry)
    return str(settings.pop("kind", "")), settings


def problems(entries: list[Any]) -> list[str]:
    """What is wrong with `tracking:` (each entry: its kind, its settings, its package)."""
    out = []
    for i, entry in enumerate(entries):
        where = f"tracking[{i}]"
        if not isinstance(entry, str | dict) or (isinstance(entry, dict) and "kind" not in entry):
            out.append(f"{where}={entry!r}: expected a tracker's name ({sorted(TRACKERS)}) or "
                       "a mapping with its `kind` and settings, e.g. {kind: mlflow, "
                       "tracking_uri: file:./mlruns}")
            continue
        kind, settings = split(entry)
        if kind not in TRACKERS:
            if ":" not in kind:
                out.append(f"{where}.kind={kind!r}: unknown; expected one of {sorted(TRACKERS)} "
                           "or 'package.module:Class' (a raycache TrainCallback)")
            continue
        known = [f.name for f in dataclasses.fields(TRACKERS[kind].settings)]
        out += [f"{where}.{key}: not a setting of the {kind} tracker; expected one of {known}"
                for key in settings if key not in known]
        out += lacking(PACKAGES[kind], f"{where}: the {kind} tracker")
    return out


def build(entries: tuple[Any, ...]) -> list[TrainCallback]:
    """Each entry's callback, built with its settings."""
    out = []
    for entry in entries:
        kind, settings = split(entry)
        if kind in TRACKERS:
            out.append(TRACKERS[kind](**settings))
            continue
        module, _, name = kind.partition(":")
        made = getattr(importlib.import_module(module), name)(**settings)
        if not isinstance(made, TrainCallback):
            raise ConfigError([f"tracking kind={kind!r} made a {type(made).__name__}; expected "
                               "a subclass of raycache.TrainCallback"])
        out.append(made)
    return out
