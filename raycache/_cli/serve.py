"""`raycache export-head` and `raycache serve`: a trained head out as a sentence-transformers
folder, or served over HTTP by Ray Serve until Ctrl-C."""

from __future__ import annotations

import argparse

from raycache._cli.command import Command
from raycache._cli.scripting import add_json, print_json
from raycache._cli.words import TRUST_HELP

__all__ = ["COMMANDS"]


def export_head_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="a head checkpoint folder (path or URI): `raycache runs` prints it")
    p.add_argument("--output", required=True, help="the folder to write (local)")
    p.add_argument("--format", choices=["sentence-transformers"], default="sentence-transformers",
                   help="the folder's format (default sentence-transformers)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    add_json(p, "the folder and its format")


def serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="a head checkpoint folder (path or URI): `raycache runs` prints it")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for other machines)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a setting of the ServeConfig (repeatable), VALUE read as "
                        "YAML, e.g. max_batch_size=64 or num_replicas=2")
    add_json(p, "the application's URL, once it runs")


def export_head(args: argparse.Namespace) -> int:
    from raycache._serve import HEAD_EXPORTS

    folder = HEAD_EXPORTS[args.format](args.checkpoint, args.output, overwrite=args.overwrite,
                                       trust_code=args.trust_code)
    if args.json:
        print_json({"folder": str(folder), "format": args.format})
    else:
        print(f"export-head: wrote a {args.format} folder to {folder}")
    return 0


def serve(args: argparse.Namespace) -> int:
    from raycache._core.overrides import overridden
    from raycache._serve.run import serve as run

    cfg = overridden({"checkpoint": args.checkpoint, "host": args.host, "port": args.port,
                      **({"trust_code": True} if args.trust_code else {})}, args.overrides)
    url = run(cfg, blocking=False)
    if args.json:
        print_json({"url": url})
    else:
        print(f"serve: POST {{\"texts\": [...]}} to {url}; GET {url}health, {url}metadata. "
              "Ctrl-C stops it")
    import sys
    import time

    sys.stdout.flush()  # a pipe reads the URL now, not when the server stops

    while True:
        time.sleep(3600)


COMMANDS = (
    Command("export-head", "write a trained head as a sentence-transformers folder (encoder + "
                           "Dense modules)", export_head_options, export_head),
    Command("serve", "serve a trained head over HTTP with Ray Serve (frozen encoder + head, "
                     "batched)", serve_options, serve),
)
