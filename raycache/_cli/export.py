"""`raycache export`: a version's rows out to Parquet, Lance or Qdrant (`--to -`: the Parquet
file to stdout, the summary to stderr)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raycache._cache.config import default_store
from raycache._cli.command import Command
from raycache._cli.scripting import OK, print_json
from raycache._cli.store import CACHE_HELP, STORE_HELP, checked_store

__all__ = ["COMMANDS"]


def options(p: argparse.ArgumentParser) -> None:
    """The export command's options."""
    p.add_argument("cache", help=CACHE_HELP)
    p.add_argument("--to", required=True,
                   help="parquet: a file path or URI, or - for stdout; lance: a dataset folder "
                        "or URI; qdrant: a local folder (qdrant-client's local mode) or an "
                        "http(s) URL")
    p.add_argument("--format", choices=["parquet", "lance", "qdrant"], default="parquet",
                   help="what to write (default parquet; lance needs pylance, qdrant "
                        "qdrant-client)")
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
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


def export(args: argparse.Namespace) -> int:
    """`raycache export`: the SDK's export; with `--to -` the file goes to stdout and the
    summary to stderr."""
    from raycache._export.run import export as run

    store = checked_store(args.store)
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


COMMANDS = (Command("export", "write a version's rows (key, labels, vectors as fixed-size "
                              "lists) to Parquet, Lance or Qdrant, for other tools", options,
                    export),)
