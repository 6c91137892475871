"""The command line for scripts: its exit codes, the --json form of what a command prints (the
SDK results' fields; a summary's to_dict() on stdout, the rest on stderr) and `--config -` (the
YAML from stdin)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["CRASH", "DAMAGED", "ERROR", "EXIT_CODES", "OK", "USAGE", "add_json", "config_arg",
           "jsonable", "print_json", "summary"]

OK = 0
DAMAGED = 1
USAGE = 2
ERROR = 3
CRASH = 4
EXIT_CODES = {
    OK: "done",
    DAMAGED: "verify found bad shards or duplicate keys (the cache needs a repair)",
    USAGE: "the command line itself is wrong (argparse: an unknown option, a missing value)",
    ERROR: "a raycache error (RaycacheError: a bad config, a cache not found, a damaged "
           "store), its message on stderr",
    CRASH: "anything else went wrong (a bug, or an error raycache does not name): the "
           "traceback on stderr",
}
"""`raycache`'s exit codes and what each means (printed by `raycache -h`)."""


def epilog() -> str:
    """The exit codes, as `raycache -h` ends."""
    return "exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())


def jsonable(value: Any) -> Any:
    """`value` as JSON takes it: a dataclass as its fields (and its public properties), tuples
    as lists, numpy numbers as numbers, NaN and infinities as null, anything else as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
               if not f.name.startswith("_")}
        for name, attr in vars(type(value)).items():
            if isinstance(attr, property) and not name.startswith("_"):
                out[name] = jsonable(getattr(value, name))
        return out
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(jsonable(value), indent=2, sort_keys=True))


def add_json(p: argparse.ArgumentParser, what: str = "the SDK result's fields") -> None:
    """A command's --json flag."""
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def config_arg(config: str) -> str | dict[str, Any]:
    """`--config`: a YAML file's path as it is, or `-`: the YAML read from stdin (its ${NAME}
    from the environment, as for a file), a ConfigError where it is not a mapping."""
    if config != "-":
        return config
    import yaml

    from raycache._core.env import expand_env
    from raycache._errors import ConfigError

    try:
        data = yaml.safe_load(sys.stdin.read()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError([f"config from stdin (--config -): not valid YAML ({exc}); fix the "
                           "YAML piped in"]) from exc
    if not isinstance(data, dict):
        raise ConfigError([f"config from stdin (--config -): expected a mapping of settings, "
                           f"got {type(data).__name__}"])
    return expand_env(data, "<stdin>")


@contextlib.contextmanager
def summary(as_json: bool, to: TextIO | None = None) -> Iterator[Callable[..., None]]:
    """Where a command's result goes: `out(result, *lines)` prints the lines (default: its
    summary()) at once; with `as_json` (or `to`, a stream other than stdout) stdout is sent to
    stderr while the block runs (progress, logs), and the result's to_dict() (or the lines)
    is written at the end as one document to `to` (default: stdout)."""
    if not as_json and to is None:
        yield lambda result, *lines: print(*(lines or [result.summary()]), sep="\n")
        return
    stream, found = to or sys.stdout, []
    with contextlib.redirect_stdout(sys.stderr):
        yield lambda result, *lines: found.append((result, lines))
    for result, lines in found:
        if as_json:
            print(json.dumps(jsonable(result.to_dict()), indent=2, sort_keys=True), file=stream)
        else:
            print(*(lines or [result.summary()]), sep="\n", file=stream)
