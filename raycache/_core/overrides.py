"""Overrides of a config, as `--set KEY=VALUE` gives them: a dotted KEY into the nested
settings, the VALUE read as YAML; the loader then checks every key (knows no stage)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from raycache._core.config import read_yaml
from raycache._errors import ConfigError

__all__ = ["overridden", "yaml_value"]

FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
"""1e-3: a float, which YAML 1.1 (PyYAML) reads as a string without a dot."""


def overridden(config: str | dict[str, Any], overrides: list[str],
               store: str | None = None, store_keys: tuple[str, ...] = ("store",),
               flat: tuple[str, ...] = ()) -> str | dict[str, Any]:
    """`config` (a YAML path or a dict) with each KEY=VALUE of `overrides` set (VALUE parsed as
    YAML, KEY dotted into the nested config) and `store` as the URI of each of `store_keys`;
    the path itself when there is nothing to override (the loader checks every key, so an
    unknown one gets its ConfigError). Under a key of `flat` (a sweep), the rest of the KEY is
    one dotted name: `sweep.optim.lr` sets sweep["optim.lr"]."""
    if not overrides and store is None:
        return config
    data = copy.deepcopy(config) if isinstance(config, dict) else _read_yaml(config)
    for i, key in enumerate(store_keys if store is not None else ()):
        if i == 0 or _get(data, key) is not None:  # a pipeline's train: its own store only
            _set(data, f"{key}.uri", store, f"--store {store}")
    for item in overrides:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError([f"--set {item!r}: expected KEY=VALUE, e.g. --set optim.lr=0.01 "
                               "or --set store.uri=/data/store"])
        _set(data, key.strip(), _value(text, item), f"--set {item}", flat)
    return data


def yaml_value(text: str, item: str) -> Any:
    """A KEY=VALUE's VALUE as `--set` reads it (YAML; 1e-3 a float too; empty: null)."""
    return _value(text, item)


def _value(text: str, item: str) -> Any:
    """A --set VALUE as YAML reads it (1e-3 a float too); empty: null."""
    if FLOAT.fullmatch(text.strip()):
        return float(text)
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError([f"--set {item!r}: VALUE {text!r} is not a YAML value ({exc}); "
                           "quote strings that hold ':' or '#'"]) from exc


def _read_yaml(path: str) -> dict[str, Any]:
    if not Path(path).is_file():
        raise ConfigError([f"config file {path!r} does not exist; check the path"])
    data = read_yaml(Path(path))  # ${NAME} from the environment, as the loader reads it
    if not isinstance(data, dict):
        raise ConfigError([f"config file {path!r}: expected a mapping of settings, got "
                           f"{type(data).__name__}"])
    return data


def _get(data: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _set(data: dict[str, Any], key: str, value: Any, where: str,
         flat: tuple[str, ...] = ()) -> None:
    """data[key] = value, a dotted key walking into nested mappings (made where missing); the
    rest of the key as one name where it is written so, or under a key of `flat`."""
    node, parts = data, key.split(".")
    for i, part in enumerate(parts[:-1]):
        rest = ".".join(parts[i:])
        if rest in node or ".".join(parts[:i]) in flat:
            node[rest] = value
            return
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError([f"{where}: {'.'.join(parts[:i + 1])} is {child!r}, not a group "
                               f"of settings, so it has no {parts[i + 1]!r}; set "
                               f"{'.'.join(parts[:i + 1])} itself"])
        node = child
    node[parts[-1]] = value
