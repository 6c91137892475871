"""The raycache command line: parse arguments, call the SDK, print."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from raycache.cache.config import default_store
from raycache.errors import DamagedCacheWarning, RaycacheError

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
    p = sub.add_parser("predict", help="run a trained head over a file, write Parquet")
    p.add_argument("--checkpoint", required=True, help="head checkpoint folder (path or URI)")
    p.add_argument("--input", required=True, help="Parquet, JSONL or CSV file, folder or glob")
    p.add_argument("--output", required=True, help="Parquet file to write (path or URI)")
    p.add_argument("--keep", nargs="+", metavar="COLUMN",
                   help="input columns to copy to the output (default: the cache's key)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--in-process", choices=["auto", "true", "false"], default="auto",
                   help="run without Ray (auto: for small CPU jobs with no cluster)")
    p.add_argument("--num-gpus", type=_gpus, default="auto",
                   help="GPUs per actor (auto: 1 where the cluster has GPUs)")
    p.add_argument("--no-progress", action="store_true")
    p = sub.add_parser("ls", help="list the committed caches in a store")
    p.add_argument("store", nargs="?", default=default_store(),
                   help="store URI (default: $RAYCACHE_STORE, else .raycache/store)")
    p = sub.add_parser("inspect", help="print a cache's manifest")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p.add_argument("--json", action="store_true", help="the whole manifest as JSON")
    p = sub.add_parser("repair", help="re-encode a cache's bad or missing shards from its source")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p.add_argument("--no-progress", action="store_true")
    p = sub.add_parser("runs", help="list a cache's training runs with status and metrics")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p = sub.add_parser("verify", help="check every shard of a cache against its manifest")
    p.add_argument("cache", help="cache name, or NAME/FINGERPRINT")
    p.add_argument("--store", default=default_store())
    p.add_argument("--fingerprint", help="this fill (default: the newest)")
    p = sub.add_parser("du", help="bytes, rows and shards of every cache folder in a store")
    p.add_argument("--store", default=default_store())
    p = sub.add_parser("gc", help="remove unfinished fills and old fingerprints (dry run unless "
                                  "--delete)")
    p.add_argument("--store", default=default_store())
    p.add_argument("--keep-last", type=int, help="keep the newest N committed fingerprints of "
                                                 "each name")
    p.add_argument("--older-than", help="remove fingerprints created longer ago, e.g. 7d")
    p.add_argument("--max-size", help="remove the oldest until the caches fit, e.g. 50GB")
    p.add_argument("--grace", default="24h",
                   help="unfinished fills untouched for this long are removed; a cache whose run "
                   "died with a checkpoint is kept this long, to resume (default 24h)")
    p.add_argument("--include-newest", action="store_true",
                   help="the newest fingerprint of a name may go too")
    p.add_argument("--delete", action="store_true", help="remove; without it, only list")
    p.add_argument("--damaged", action="store_true",
                   help="caches whose manifest or shard list cannot be read go too (else they "
                   "are kept and listed)")
    p = sub.add_parser("demo", help="fill and train on a real dataset and encoder, locally")
    p.add_argument("--store", default=".raycache/store")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--workers", type=_workers, default="auto",
                   help="DDP workers; 0 trains in-process; auto picks by cache size")
    p.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = _warning(shown, args.command)
    try:
        return COMMANDS[args.command](args)
    except RaycacheError as exc:
        print(f"raycache {args.command}: error: {exc}", file=sys.stderr)
        return 2
    finally:
        warnings.showwarning = shown


def _warning(shown, command: str):
    """warnings.showwarning that prints a DamagedCacheWarning as one line, as errors are."""
    def show(message, category, *args, **kwargs) -> None:
        if issubclass(category, DamagedCacheWarning):
            print(f"raycache {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *args, **kwargs)
    return show


def _store(uri: str):
    """The store a command reads, checked: reachable, and a folder (StoreError, with the fix,
    rather than the filesystem's own error)."""
    from raycache.cache.store import Store

    store = Store(uri)
    store.check_reachable()
    store.check_folder()
    return store


def _fill(args: argparse.Namespace) -> int:
    from raycache.fill.run import fill

    print(fill(args.config, progress=not args.no_progress).summary())
    return 0


def _train(args: argparse.Namespace) -> int:
    from raycache.train.run import train

    _print_history(train(args.config, progress=not args.no_progress))
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    from raycache.pipeline import pipeline

    _print_history(pipeline(args.config, progress=not args.no_progress).train)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from raycache.predict.run import predict_file

    flags = {"auto": "auto", "true": True, "false": False}
    print(predict_file({"checkpoint": args.checkpoint, "input": args.input,
                        "output": args.output, "keep": args.keep, "overwrite": args.overwrite,
                        "in_process": flags[args.in_process], "num_gpus": args.num_gpus},
                       progress=not args.no_progress).summary())
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
    from raycache.cache.committed import ls
    from raycache.cache.manifest import human_bytes

    caches = ls(_store(args.store))
    if not caches:
        print(f"no committed caches in {args.store}")
    for c in caches:
        m = c.manifest
        encs = ",".join(f"{e.name}:{e.dim}" for e in m.encoders)
        print(f"{m.name}/{m.fingerprint}  rows={m.rows}  size={human_bytes(m.bytes)}  "
              f"encoders={encs}  created={m.created}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from raycache.cache.committed import open_cache

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, _store(args.store), fp or None)
    m = cache.manifest
    if args.json:
        print(json.dumps(m.to_dict(), indent=2, sort_keys=True))
        return 0
    print(f"cache        {m.name}\nfingerprint  {m.fingerprint}\nlocation     {cache.uri}")
    print(f"format       v{m.format_version}\ncreated      {m.created}")
    print(f"rows         {m.rows} in {m.shard_count} shards ({m.bytes} bytes)")
    print(f"key          {m.key_column}\nlabels       {m.label_types}")
    for e in m.encoders:
        print(f"encoder      {e.name}: {e.kind} on {e.input!r}, dim {e.dim}, {e.dtype}, "
              f"weights {e.weights_digest[:16]}")
    for f in m.inputs["source"]["files"]:
        print(f"source       {f['uri']} ({f['size']} bytes, version {f['version']})")
    return 0


def _gpus(text: str) -> float | str:
    return text if text == "auto" else float(text)


def _repair(args: argparse.Namespace) -> int:
    from raycache.upkeep.repair import repair

    name, _, fp = args.cache.partition("/")
    result = repair(name, _store(args.store), fp or None, progress=not args.no_progress)
    if result.hit:
        print(f"repair {name}/{result.cache.fingerprint[:12]}: every shard is good; nothing to do")
    else:
        print(result.summary().replace("fill ", "repair ", 1))
    return 0


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _runs(args: argparse.Namespace) -> int:
    from raycache.cache.committed import open_cache
    from raycache.train.runs import list_runs

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, _store(args.store), fp or None)
    runs = list_runs(cache)
    if not runs:
        print(f"no training runs of {cache.name}/{cache.fingerprint[:12]} in {args.store}")
    for run in runs:
        print(run.line())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from raycache.cache.committed import open_cache
    from raycache.upkeep.verify import verify

    name, _, fp = args.cache.partition("/")
    report = verify(open_cache(name, _store(args.store), args.fingerprint or fp or None))
    for line in report.lines():
        print(line)
    if not report.ok:
        print(f"{report.cache}: {len(report.bad)} of {report.shards} shards bad; re-encode them "
              f"with `raycache repair {name} --store {args.store}`", file=sys.stderr)
    return 0 if report.ok else 1


def _du(args: argparse.Namespace) -> int:
    from raycache.cache.manifest import human_bytes
    from raycache.upkeep.du import du

    found = du(_store(args.store))
    for u in found:
        print(u.line())
    total = sum(u.bytes for u in found)
    print(f"total {human_bytes(total)} ({total} bytes) in {len(found)} cache folder(s) of "
          f"{args.store}")
    return 0


def _gc(args: argparse.Namespace) -> int:
    from raycache.upkeep.gc import gc

    result = gc(_store(args.store), keep_last=args.keep_last, older_than=args.older_than,
                max_size=args.max_size, grace=args.grace, delete=args.delete,
                include_newest=args.include_newest, damaged=args.damaged)
    for line in result.lines():
        print(line)
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
    "predict": _predict,
    "ls": _ls,
    "inspect": _inspect,
    "repair": _repair,
    "runs": _runs,
    "verify": _verify,
    "du": _du,
    "gc": _gc,
    "demo": _demo,
}
