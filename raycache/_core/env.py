"""Environment variables in YAML config files: ${NAME} and ${NAME:-default} in string values."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from raycache._errors import ConfigError

__all__ = ["expand_env"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(data: Any, path: str | Path) -> Any:
    """`data` (a YAML file's contents) with ${NAME} in every string value replaced by the
    variable's value, ${NAME:-default} by the default where NAME is unset or empty; keys are
    left as they are. Every unset variable without a default is one problem of a ConfigError."""
    missing: list[str] = []
    out = _walk(data, missing)
    if missing:
        raise ConfigError([
            f"config file {str(path)!r}: ${{{name}}} is not set; export {name} (for a Ray job: "
            "in the environment `ray start` ran in, or in the runtime_env's env_vars), or write "
            f"${{{name}:-default}} in the file" for name in dict.fromkeys(missing)
        ])
    return out


def _walk(value: Any, missing: list[str]) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: _one(m, missing), value)
    if isinstance(value, list):
        return [_walk(v, missing) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, missing) for k, v in value.items()}
    return value


def _one(match: re.Match[str], missing: list[str]) -> str:
    name, default = match.group(1), match.group(2)
    value = os.environ.get(name)
    if value:
        return value
    if default is not None:
        return default
    missing.append(name)
    return match.group(0)
