"""The raycache command line: parse arguments, call the SDK, print."""

from __future__ import annotations

import argparse
import json
import sys

from raycache.config import default_store
from raycache.errors import RaycacheError

DESCRIPTION = "Fill caches of frozen-encoder embeddings on Ray, and train heads on them."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raycache", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("fill", "fill a cache from a YAML config"),
                       ("train", "train a head on a cache from a YAML config"),
                       ("pipeline", "fill, then train on that fill, from one YAML config")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="YAML file")
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p = sub.add_parser("ls", help="list the committed caches in a store")
    p.add_argument("store", nargs="?", default=default_store(),
                   help="store URI (default: $RAYCACHE_STORE, else .raycache/store)")
    p = sub.add_parser("inspect", help="print a cache's manifest")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p.add_argument("--json", action="store_true", help="the whole manifest as JSON")
    p = sub.add_parser("runs", help="list a cache's training runs with status and metrics")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p = sub.add_parser("demo", help="fill and train on a real dataset and encoder, locally")
    p.add_argument("--store", default=".raycache/store")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--workers", type=_workers, default="auto",
                   help="DDP workers; 0 trains in-process; auto picks by cache size")
    p.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RaycacheError as exc:
        print(f"raycache {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _fill(args: argparse.Namespace) -> int:
    from raycache.fill import fill

    print(fill(args.config, progress=not args.no_progress).summary())
    return 0


def _train(args: argparse.Namespace) -> int:
    from raycache.train import train

    _print_history(train(args.config, progress=not args.no_progress))
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    from raycache.pipeline import pipeline

    _print_history(pipeline(args.config, progress=not args.no_progress).train)
    return 0


def _print_history(result) -> None:
    """Every epoch when the loop printed nothing (--no-progress); else only the final one."""
    history = result.history if not result.spec.progress else result.history[-1:]
    for m in history:
        print(f"{'final ' if result.spec.progress else ''}epoch {m['epoch']:3d}  "
              f"train_loss {m['train_loss']:.4f}  train_acc {m['train_acc']:.3f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}")
    print(result.summary())


def _ls(args: argparse.Namespace) -> int:
    from raycache.cache import ls
    from raycache.manifest import human_bytes

    caches = ls(args.store)
    if not caches:
        print(f"no committed caches in {args.store}")
    for c in caches:
        m = c.manifest
        encs = ",".join(f"{e.name}:{e.dim}" for e in m.encoders)
        print(f"{m.name}/{m.fingerprint}  rows={m.rows}  size={human_bytes(m.bytes)}  "
              f"encoders={encs}  created={m.created}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from raycache.cache import open_cache

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, args.store, fp or None)
    m = cache.manifest
    if args.json:
        print(json.dumps(m.to_dict(), indent=2, sort_keys=True))
        return 0
    print(f"cache        {m.name}\nfingerprint  {m.fingerprint}\nlocation     {cache.uri}")
    print(f"format       v{m.format_version}\ncreated      {m.created}")
    print(f"rows         {m.rows} in {len(m.shards)} shards ({m.bytes} bytes)")
    print(f"key          {m.key_column}\nlabels       {m.label_types}")
    for e in m.encoders:
        print(f"encoder      {e.name}: {e.kind} on {e.input!r}, dim {e.dim}, {e.dtype}, "
              f"weights {e.weights_digest[:16]}")
    for f in m.inputs["source"]["files"]:
        print(f"source       {f['uri']} ({f['size']} bytes, version {f['version']})")
    return 0


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _runs(args: argparse.Namespace) -> int:
    from raycache.cache import open_cache
    from raycache.runs import list_runs

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, args.store, fp or None)
    runs = list_runs(cache)
    if not runs:
        print(f"no training runs of {cache.name}/{cache.fingerprint[:12]} in {args.store}")
    for run in runs:
        print(run.line())
    return 0


def _demo(args: argparse.Namespace) -> int:
    from raycache.demo import run

    run(store=args.store, epochs=args.epochs, workers=args.workers,
        progress=not args.no_progress)
    return 0


COMMANDS = {
    "fill": _fill,
    "train": _train,
    "pipeline": _pipeline,
    "ls": _ls,
    "inspect": _inspect,
    "runs": _runs,
    "demo": _demo,
}
