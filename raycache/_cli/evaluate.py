"""`raycache evaluate`: a head's scores on a labelled file or its run's held-out rows, printed
(and written with --output)."""

from __future__ import annotations

import argparse
import json
import sys

from raycache._cli.command import Command
from raycache._cli.words import TRUST_HELP

__all__ = ["COMMANDS"]


def options(p: argparse.ArgumentParser) -> None:
    """The evaluate command's options."""
    p.add_argument("--checkpoint", required=True,
                   help="a head checkpoint folder (path or URI), or a run folder (its final "
                        "checkpoint): `raycache runs` prints it")
    p.add_argument("--input",
                   help="labelled Parquet, JSONL or CSV file, folder or glob, with the head's "
                        "input column(s) and its label (default: the run's own validation "
                        "keys, read from its cache)")
    p.add_argument("--held-out", metavar="FILE",
                   help="also write the run's validation keys and labels (the rows scored "
                        "without --input) to FILE: Parquet, or JSON lines (.jsonl) or CSV "
                        "(.csv); join it with the source on the key for a file of their inputs")
    p.add_argument("--label", help="the label column (default: the one the head was trained on)")
    p.add_argument("--output", help="a folder to write evaluation.json, confusion.txt and "
                                    "confusion.png into")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of an earlier evaluation in --output")
    p.add_argument("--no-progress", action="store_true",
                   help="print no progress of the encoding of --input's rows")
    p.add_argument("--json", action="store_true",
                   help="print evaluation.json's content instead of the tables")


def evaluate(args: argparse.Namespace) -> int:
    """Evaluate, then print the summary, the per-class table and the confusion matrix."""
    from raycache._predict.evaluate import evaluate as run

    if args.held_out:
        from raycache._predict.held_out import write_held_out

        n = write_held_out(args.checkpoint, args.held_out, label=args.label,
                           trust_code=args.trust_code)
        print(f"wrote {n:,} held-out rows (key, label) to {args.held_out}", file=sys.stderr)
    ev = run(args.checkpoint, args.input, label=args.label, output=args.output,
             trust_code=args.trust_code, overwrite=args.overwrite,
             progress=not args.no_progress)
    if args.json:
        print(json.dumps(ev.to_dict(), indent=2))
        return 0
    print(ev.summary())
    print()
    print(ev.table())
    print()
    print(ev.confusion_table())
    if args.output:
        print(f"\nwrote evaluation.json, confusion.txt and confusion.png to {args.output}")
    return 0


COMMANDS = (Command("evaluate", "score a trained head on a labelled file: accuracy, macro-F1, "
                                "per-class precision/recall/F1 and the confusion matrix",
                    options, evaluate),)
