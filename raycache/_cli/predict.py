"""`raycache predict`: a trained head over a file; `--input -` reads JSONL or CSV from stdin,
`--output -` writes JSONL to stdout (the summary then goes to stderr)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raycache._cli.command import Command
from raycache._cli.jobs import EXAMPLES, add_overrides
from raycache._cli.scripting import OK, add_json, summary
from raycache._cli.words import PREDICT_FLAGS, TRUST_HELP, flags_named, old_flag
from raycache._core.overrides import overridden

__all__ = ["COMMANDS", "sniff"]


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="a head checkpoint folder (path or URI), or a run folder (its final "
                        "checkpoint, else its newest): `raycache runs` prints it")
    p.add_argument("--input", required=True,
                   help="Parquet, JSONL or CSV file, folder or glob (-: JSONL or CSV from stdin)")
    p.add_argument("--output", required=True,
                   help="Parquet file to write (path or URI; -: JSONL to stdout)")
    p.add_argument("--passthrough", nargs="+", metavar="COLUMN",
                   help="input columns to copy to the output (default: the cache's key)")
    old_flag(p, "--keep", "--passthrough", nargs="+", metavar="COLUMN")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument("--in-process", choices=["auto", "true", "false"], default="auto",
                   help="run without Ray (auto: for small CPU jobs with no cluster)")
    p.add_argument("--num-gpus", type=_gpus, default="auto",
                   help="GPUs per actor (auto: 1 where the cluster has GPUs)")
    add_overrides(p, EXAMPLES["predict"], "the PredictConfig these flags make")
    p.add_argument("--no-progress", action="store_true", help="print no progress bar")
    add_json(p, "the summary's fields (with --output -: to stderr, and the rows' "
                "probabilities exact, not rounded to 4 digits)")


def sniff(data: bytes) -> str:
    """The format of text piped in: jsonl where its first character is `{`, else csv."""
    return "jsonl" if data.lstrip()[:1] == b"{" else "csv"


def predict(args: argparse.Namespace) -> int:
    from raycache._predict.run import predict_file
    from raycache._train.folder.record import checkpoint_of

    flags = {"auto": "auto", "true": True, "false": False}
    config = overridden({"checkpoint": args.checkpoint, "input": args.input,
                         "output": args.output, "overwrite": args.overwrite,
                         "in_process": flags[args.in_process], "pool": {"num_gpus": args.num_gpus},
                         **({"passthrough": args.passthrough} if args.passthrough else {}),
                         **({"trust_code": True} if args.trust_code else {})},
                        args.overrides)
    config["checkpoint"] = checkpoint_of(config["checkpoint"], config.get("options"))
    with piped(config) as config, flags_named(PREDICT_FLAGS):
        piping = args.output == "-"
        with summary(args.json, sys.stderr if piping else None) as out:
            result = predict_file(config, progress=not args.no_progress)
            out(dataclasses.replace(result, output="-") if piping else result)
        if piping:
            _jsonl(config["output"], sys.stdout, exact=args.json)
    return OK


@contextlib.contextmanager
def piped(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The config with `-` replaced: stdin written to a file, the output to a temporary
    Parquet file (which `_jsonl` then writes to stdout); both removed after."""
    if "-" not in (config["input"], config["output"]):
        yield config
        return
    with tempfile.TemporaryDirectory(prefix="raycache-predict-") as tmp:
        config = dict(config)
        if config["input"] == "-":
            data = sys.stdin.buffer.read()
            fmt = config.get("format") or sniff(data)
            path = Path(tmp) / f"stdin.{fmt}"
            path.write_bytes(data)
            config.update(input=str(path), format=fmt)
        if config["output"] == "-":
            config.update(output=str(Path(tmp) / "out.parquet"), overwrite=True)
        yield config


SHOWN_DIGITS = 4
"""Significant digits of the probabilities `--output -` prints for people (exact with --json)."""


def _jsonl(path: str, stream: Any, exact: bool = False) -> None:
    """A Parquet file's rows as JSON lines: float32 values as their shortest text that reads
    back as the same float32 (0.000363, not 0.00036299999919719994), probabilities rounded to
    SHOWN_DIGITS significant digits unless `exact`."""
    import json

    import pyarrow.parquet as pq

    from raycache._cli.scripting import jsonable
    from raycache._predict.stage import PROBABILITIES

    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        shown = {f.name: (SHOWN_DIGITS if f.name == PROBABILITIES and not exact else None)
                 for f in batch.schema if _float32(f.type)}
        for row in batch.to_pylist():
            for name, digits in shown.items():
                row[name] = _shown(row[name], digits)
            stream.write(json.dumps(jsonable(row)) + "\n")
    stream.flush()


def _float32(t: Any) -> bool:
    import pyarrow as pa

    inner = t.value_type if pa.types.is_list(t) or pa.types.is_fixed_size_list(t) else t
    return pa.types.is_float32(inner)


def _shown(value: Any, digits: int | None) -> Any:
    """A float32 value (or a list of them) as a float whose repr is its shortest round trip,
    or rounded to `digits` significant digits."""
    import numpy as np

    if isinstance(value, list):
        return [_shown(v, digits) for v in value]
    if not isinstance(value, float):
        return value  # None
    if digits:
        return float(f"{value:.{digits}g}")
    return float(np.format_float_positional(np.float32(value), unique=True, trim="0"))


def _gpus(text: str) -> float | str:
    return text if text == "auto" else float(text)


COMMANDS = (Command("predict", "run a trained head over a file, write Parquet", options, predict),)
