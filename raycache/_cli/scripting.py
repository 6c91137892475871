"""The command line for scripts: its exit codes, the --json form of what a command prints (the
SDK results' fields; a summary's to_dict() on stdout, the rest on stderr), `--config -` (the YAML
from stdin) and `raycache export` (`--to -`: the Parquet file to stdout)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["CRASH", "DAMAGED", "ERROR", "EXIT_CODES", "OK", "USAGE", "add_export", "add_json",
           "config_arg", "export", "jsonable", "print_json", "summary"]

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


def add_export(sub: Any, store_help: str, cache_help: str, default_store: str) -> None:
    """The `raycache export` command's parser."""
    text = ("write a version's rows (key, labels, vectors as fixed-size lists) to Parquet, "
            "Lance or Qdrant, for other tools")
    p = sub.add_parser("export", help=text, description=text)
    p.add_argument("cache", help=cache_help)
    p.add_argument("--to", required=True,
                   help="parquet: a file path or URI, or - for stdout; lance: a dataset folder "
                        "or URI; qdrant: a local folder (qdrant-client's local mode) or an "
                        "http(s) URL")
    p.add_argument("--format", choices=["parquet", "lance", "qdrant"], default="parquet",
                   help="what to write (default parquet; lance needs pylance, qdrant "
                        "qdrant-client)")
    p.add_argument("--store", default=default_store, help=store_help)
    p.add_argument("--encoders", nargs="+", metavar="ENCODER",
                   help="the encoders whose vectors are written (default: all)")
    p.add_argument("--dtype", choices=["float32", "float16", "float64"], default="float32",
                   help="the vectors' number type (default float32)")
    p.add_argument("--collection", help="qdrant: the collection (default: the cache's name)")
    p.add_argument("--index", action="store_true",
                   help="lance: build an IVF_PQ vector index on the first encoder (cosine)")
    p.add_argument("--head", metavar="CHECKPOINT",
                   help="also a trained head's vectors of each row (a similarity head's "
                        "embeddings; --layer penultimate for a classifier's last hidden layer)"
                        "; only its column unless --encoders names some")
    p.add_argument("--layer", choices=["output", "penultimate"], default="output",
                   help="--head: its output layer (default) or the one before it")
    p.add_argument("--head-column", default="head",
                   help="--head: the column of its vectors (default head)")
    p.add_argument("--tensor", action="store_true",
                   help="parquet: vectors as Arrow fixed-shape tensors (Ray Data reads 2-D "
                        "arrays; Hugging Face datasets cannot read them)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing file, dataset or collection")
    p.add_argument("--json", action="store_true", help="print the result's fields as JSON")


def export(args: argparse.Namespace, store: Any) -> int:
    """`raycache export`: the SDK's export; with `--to -` the file goes to stdout and the
    summary to stderr."""
    from raycache._export.run import export as run

    to: Any = args.to
    if to == "-":
        if args.format != "parquet":
            from raycache._errors import ConfigError

            raise ConfigError([f"--to - (stdout) takes --format parquet, not {args.format}; "
                               "name a folder or URL for lance and qdrant"])
        to = sys.stdout.buffer
    result = run(args.cache, to, args.format, store=store, encoders=args.encoders,
                 dtype=args.dtype, overwrite=args.overwrite, collection=args.collection,
                 index=args.index, head=args.head, layer=args.layer,
                 head_column=args.head_column, tensor=args.tensor)
    if args.json and args.to != "-":
        print_json(result)
    else:
        print(result.summary(), file=sys.stderr if args.to == "-" else sys.stdout)
    return OK


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
