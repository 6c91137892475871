"""Config loading: dict or YAML -> dataclass, every problem in one ConfigError (knows no stage)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from raycache._core.env import expand_env
from raycache._errors import ConfigError

__all__ = ["AUTO", "at", "is_name", "load", "non_finite", "parse_value", "positive",
           "positive_or_auto", "read_yaml", "sweepable", "walk_problems", "worker_problems"]

AUTO = "auto"


def positive(cfg: Any, *names: str) -> list[str]:
    return [f"{n}={getattr(cfg, n)}: must be >= 1" for n in names if getattr(cfg, n) < 1]


def positive_or_auto(cfg: Any, *names: str) -> list[str]:
    out = []
    for n in names:
        v = getattr(cfg, n)
        if v != AUTO and (isinstance(v, str) or v < 1):
            out.append(f"{n}={v!r}: expected a whole number >= 1, or 'auto'")
    return out


def worker_problems(cfg: Any, kind: str) -> list[str]:
    """The checks of the worker settings every config that runs Ray workers spells the same
    way: `num_workers` ('auto', 0 for this process, or a count) and `cpus_per_worker` (> 0);
    `kind` says what the workers are (DDP, Ray)."""
    out = []
    count = cfg.num_workers
    if not (count == AUTO or (isinstance(count, int) and not isinstance(count, bool)
                              and count >= 0)):
        out.append(f"num_workers={count!r}: expected 'auto', 0 (in this process) or a number "
                   f"of {kind} workers, e.g. 4")
    if cfg.cpus_per_worker <= 0:
        out.append(f"cpus_per_worker={cfg.cpus_per_worker}: must be > 0, e.g. 0.5")
    return out


def non_finite(cfg: Any, where: str = "") -> list[str]:
    """Every float setting of the config `cfg` (its nested configs' and lists' too) that is
    NaN or infinite: YAML's .nan and .inf parse as floats, and would reach a library as is."""
    out = []
    for f in dataclasses.fields(cfg):
        value, name = getattr(cfg, f.name), f"{where}{f.name}"
        if dataclasses.is_dataclass(value):
            out += non_finite(value, f"{name}.")
            continue
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            default = f.default if isinstance(f.default, float) else None
            fix = (f"e.g. {default:g} (its default)" if default is not None
                   else "or leave it out" if f.default is None else "")
            out.append(f"{name}={value}: expected a finite number, not NaN or infinity; "
                       f"give a finite value{', ' + fix if fix else ''}")
    return out


def is_name(s: str) -> bool:
    return bool(s) and all(c.isalnum() or c in "-_." for c in s) and not s.startswith(".")


T = typing.TypeVar("T")


def load(cls: type[T], data: dict[str, Any] | str | Path | T,
         *checks: Callable[[T], list[str]]) -> T:
    """Build and check a config from a dict, a YAML file path, or an instance: its own
    `problems()` and each of `checks` (a stage's checks against its registries), every problem
    in one ConfigError."""
    if isinstance(data, cls):
        obj = data
    else:
        if isinstance(data, str | Path):
            path = Path(data)
            if not path.is_file():
                raise ConfigError([f"config file {str(path)!r} does not exist; check the path"])
            data = read_yaml(path)
        if hasattr(cls, "moved"):  # settings that moved since (e.g. flat keys into groups)
            data = cls.moved(data)
        problems: list[str] = []
        obj = _build(cls, data, "", problems)
        if problems:
            raise ConfigError(problems)
    problems = walk_problems(obj)
    for check in checks:
        problems += check(obj)
    if problems:
        raise ConfigError(problems)
    return obj


_FIELD = re.compile(r"^\w+(\[[^\]]*\])?(\.|=|: )")


def at(path: str, problem: str) -> str:
    """`problem`, spelt relative to a config (`dtype='x': ...`, or about the config itself),
    named from the root: `encoders[0].dtype='x': ...`, `source: ...`."""
    if not path:
        return problem
    return f"{path}.{problem}" if _FIELD.match(problem) else f"{path}: {problem}"


def walk_problems(obj: Any, path: str = "") -> list[str]:
    """Every config's own `problems()` in the tree under `obj` (nested configs and lists of
    them), each named by the path the walk took from the root: one spelling everywhere."""
    out = [at(path, p) for p in obj.problems()] if hasattr(obj, "problems") else []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = f"{path}.{f.name}" if path else f.name
        if dataclasses.is_dataclass(value):
            out += walk_problems(value, name)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    out += walk_problems(item, f"{name}[{i}]")
    return out


def read_yaml(path: Path) -> Any:
    """A YAML file's contents ({} when empty), its ${NAME} and ${NAME:-default} taken from the
    environment (raycache._core.env); a syntax error, or text that is not UTF-8, as a
    ConfigError naming the file, the line and column, and the problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise ConfigError([f"config file {str(path)!r}{where}: not valid YAML ({what}); fix "
                           "the YAML there (indentation, a missing ':' or a quote)"]) from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError([f"config file {str(path)!r}: not readable as YAML ({exc}); save it "
                           "as UTF-8 YAML text"]) from exc
    return expand_env(data, path)


def parse_value(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    """`value` checked against the type `tp` (a field's annotation), each problem appended."""
    return _value(tp, value, where, problems)


def _build(cls: type, data: Any, where: str, problems: list[str]) -> Any:
    if not isinstance(data, dict):
        problems.append(f"{where or 'config'}: expected a mapping, got {type(data).__name__} "
                        f"{data!r}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    here = f"{where}." if where else ""
    for key in sorted(set(data) - set(fields)):
        near = _near(str(key), cls)
        hint = f" (did you mean {here}{near}?)" if near else ""
        problems.append(f"{here}{key}: unknown field{hint}; expected one of {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required:
                problems.append(f"{here}{name}: missing (required)")
            continue
        kwargs[name] = _value(hints[name], data[name], f"{here}{name}", problems)
    if problems:
        return None
    return cls(**kwargs)


def _paths(cls: type, prefix: str = "", depth: int = 2) -> list[str]:
    """The dotted paths of `cls`'s fields and, `depth` levels down, of its dataclass fields'."""
    out = []
    for f in dataclasses.fields(cls):
        out.append(prefix + f.name)
        tp = typing.get_type_hints(cls).get(f.name)
        if depth > 1 and dataclasses.is_dataclass(tp):
            out += _paths(tp, f"{prefix}{f.name}.", depth - 1)
    return out


def _near(key: str, cls: type) -> str | None:
    """The known path closest to an unknown `key` (difflib), by the whole path or its last
    part (`epoch` -> `epochs`, `optim.lrr` -> `optim.lr`, `epoch` -> `loop.epochs`)."""
    paths = _paths(cls)
    found = difflib.get_close_matches(key, paths, n=1, cutoff=0.75)
    if found:
        return found[0]
    leaves = {p.rsplit(".", 1)[-1]: p for p in reversed(paths)}
    found = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(leaves), n=1, cutoff=0.75)
    return leaves[found[0]] if found else None


def _value(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            out = _value(arg, value, where, trial)
            if not trial:
                return out
        problems.append(f"{where}={value!r}: expected {_type_name(tp)}")
        return None
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where, problems)
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}={value!r}: expected a list")
            return None
        return [_value(args[0], v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}={value!r}: expected a mapping")
            return None
        return dict(value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is Any or (isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    problems.append(f"{where}={value!r}: expected {_type_name(tp)}, got {type(value).__name__}")
    return None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def sweepable(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
              sweep: str) -> Any:
    """A field a `sweep:` may vary, with what it takes (training's sweep.grid.KEYS)."""
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"sweep": sweep})
    return dataclasses.field(default=default, metadata={"sweep": sweep})
