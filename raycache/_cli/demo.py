"""`raycache demo` and `raycache demo-data`: the demo run, and its dataset written alone."""

from __future__ import annotations

import argparse
import contextlib
import sys

from raycache._cli.command import Command
from raycache._cli.scripting import add_json, print_json

__all__ = ["COMMANDS"]


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _per_topic(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1 "
                                         "(docstrings a topic; default 150)")
    return value


def demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=".raycache/store",
                   help="store URI for the demo's cache (default .raycache/store)")
    p.add_argument("--epochs", type=int, help="epochs to train (default: training's defaults, "
                                              "a solved head or epochs until a plateau)")
    p.add_argument("--workers", type=_workers, default="auto",
                   help="DDP workers; 0 trains in-process; auto picks by cache size")
    p.add_argument("--no-progress", action="store_true",
                   help="print no progress bars or per-epoch lines")
    add_json(p, "the demo's figures (the rest on stderr)")


def demo_data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default="data/stdlib-docs.parquet",
                   help="the Parquet file to write (default data/stdlib-docs.parquet)")
    p.add_argument("--per-topic", type=_per_topic, default=150,
                   help="docstrings a topic, of six topics (default 150)")
    add_json(p, "the file's path and rows")


def demo(args: argparse.Namespace) -> int:
    from raycache._cli.demo_run import run

    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        figures = run(store=args.store, epochs=args.epochs, workers=args.workers,
                      progress=not args.no_progress)
    if args.json:
        print_json(figures)
    return 0


def demo_data(args: argparse.Namespace) -> int:
    from raycache._source.demo_data import write_stdlib_docs

    path = write_stdlib_docs(args.path, args.per_topic)
    if args.json:
        import pyarrow.parquet as pq

        print_json({"path": str(path), "rows": pq.ParquetFile(path).metadata.num_rows})
    else:
        print(path)
    return 0


COMMANDS = (
    Command("demo", "fill and train on a real dataset and encoder, locally", demo_options, demo),
    Command("demo-data", "write the demo's dataset (stdlib docstrings labelled by topic) as a "
                         "Parquet file, and print its path; an identical file is left untouched",
            demo_data_options, demo_data),
)
