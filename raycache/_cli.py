"""The raycache command line: parse arguments, call the SDK, print."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from raycache._cache.config import default_store
from raycache._cli_evaluate import add_evaluate, run_evaluate
from raycache._cli_interrupted import interrupted
from raycache._cli_serve import SERVING_COMMANDS, add_serving
from raycache._cli_words import GC_FLAGS, PREDICT_FLAGS, flags_named, one_line, store_folder
from raycache._core.overrides import overridden
from raycache._core.version import package_version
from raycache._errors import RaycacheError
from raycache._scripting import (
    CRASH,
    DAMAGED,
    ERROR,
    OK,
    add_export,
    add_json,
    config_arg,
    epilog,
    export,
    print_json,
)

DESCRIPTION = "Fill caches of frozen-encoder embeddings on Ray, and train heads on them."


# --- the parser: every command, every option with its help ---------------------------------

STORE_HELP = ("store URI: a folder, s3://bucket/prefix or any fsspec URI (default: "
              "$RAYCACHE_STORE, else .raycache/store)")
CACHE_HELP = "cache name, or NAME/FINGERPRINT (default fingerprint: the newest)"
SKIPPED_SHOWN = 20
"""Skipped rows `raycache inspect` lists (--json: all)."""


def build_parser() -> argparse.ArgumentParser:
    """The raycache command line: `--store` on every command that reads or writes a store,
    and help text on every option."""
    parser = argparse.ArgumentParser(prog="raycache", description=DESCRIPTION, epilog=epilog())
    parser.add_argument("--version", action="version", version=f"raycache {package_version()}",
                        help="print raycache's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in (("fill", "fill a cache from a YAML config"),
                       ("train", "train a head on a cache from a YAML config"),
                       ("pipeline", "fill, then train on that fill, from one YAML config"),
                       ("probe", "compare encoders and heads on caches (logreg, knn, linear, "
                                 "mlp) from a YAML config")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--config", required=True, help="the YAML config file (-: from stdin)")
        _overrides(p, EXAMPLES[name])
        p.add_argument("--store", help="store URI; replaces the config's store.uri "
                                       "(default: the config's)")
        p.add_argument("--no-progress", action="store_true",
                       help="print no progress bars or per-epoch lines while it runs")
    text = "run a trained head over a file, write Parquet"
    p = sub.add_parser("predict", help=text, description=text)
    p.add_argument("--checkpoint", required=True,
                   help="a head checkpoint folder (path or URI), or a run folder (its final "
                        "checkpoint, else its newest): `raycache runs` prints it")
    p.add_argument("--input", required=True, help="Parquet, JSONL or CSV file, folder or glob")
    p.add_argument("--output", required=True, help="Parquet file to write (path or URI)")
    p.add_argument("--keep", nargs="+", metavar="COLUMN",
                   help="input columns to copy to the output (default: the cache's key)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--in-process", choices=["auto", "true", "false"], default="auto",
                   help="run without Ray (auto: for small CPU jobs with no cluster)")
    p.add_argument("--num-gpus", type=_gpus, default="auto",
                   help="GPUs per actor (auto: 1 where the cluster has GPUs)")
    _overrides(p, EXAMPLES["predict"], "the PredictConfig these flags make")
    p.add_argument("--no-progress", action="store_true", help="print no progress bar")
    text = "list the committed caches in a store"
    p = sub.add_parser("ls", help=text, description=text)
    p.add_argument("store", nargs="?", default=argparse.SUPPRESS, metavar="STORE",
                   help="the same as --store")
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    add_json(p)
    for name, text in (("inspect", "print a cache's manifest"),
                       ("repair", "re-encode a cache's bad or missing shards from its source"),
                       ("runs", "list a cache's training runs: status, epochs, objective, head, "
                                "monitored metric and the checkpoint predict takes"),
                       ("verify", "check every shard of a cache against its manifest")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("cache", help=CACHE_HELP)
        p.add_argument("--store", default=default_store(), help=STORE_HELP)
        if name in ("inspect", "runs", "verify"):
            add_json(p, *["the whole manifest"] * (name == "inspect"))
        if name == "repair":
            p.add_argument("--no-progress", action="store_true", help="print no progress bar")
        if name == "verify":
            p.add_argument("--fingerprint", help="this fill (default: the newest)")
    text = ("copy a version's sparse or small shared shards' kept rows into its own shards "
            "(nothing encoded), so its reads stay at memory speed")
    p = sub.add_parser("compact", help=text, description=text)
    p.add_argument("cache", help=CACHE_HELP)
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    p.add_argument("--below", type=float, default=None,
                   help="compact shared shards that keep less than this share of their rows "
                        "(default: the fill's compact_below, 0.9)")
    p.add_argument("--no-progress", action="store_true", help="print no progress bar")
    text = "bytes, rows and shards of every cache folder in a store"
    p = sub.add_parser("du", help=text, description=text)
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    add_json(p)
    text = "remove unfinished fills and old fingerprints (dry run unless --delete)"
    p = sub.add_parser("gc", help=text, description=text)
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    p.add_argument("--keep-last", type=int, help="keep the newest N committed fingerprints of "
                                                 "each name")
    p.add_argument("--older-than", help="remove fingerprints first committed longer ago (7d)")
    p.add_argument("--max-size", help="remove the oldest until the caches fit, e.g. 50GB")
    p.add_argument("--grace", default="24h",
                   help="unfinished fills untouched for this long are removed; a cache whose run "
                   "died with a checkpoint is kept this long, to resume (default 24h, or 0)")
    p.add_argument("--include-newest", action="store_true", help="a name's newest may go too")
    p.add_argument("--keep-runs", action="store_true",
                   help="keep the trained heads (runs/) of the cache folders it removes")
    p.add_argument("--delete", action="store_true", help="remove; without it, only list")
    p.add_argument("--damaged", action="store_true",
                   help="caches whose manifest or shard list cannot be read go too (else kept)")
    add_json(p)
    add_export(sub, STORE_HELP, CACHE_HELP, default_store())
    text = "fill and train on a real dataset and encoder, locally"
    p = sub.add_parser("demo", help=text, description=text)
    p.add_argument("--store", default=".raycache/store",
                   help="store URI for the demo's cache (default .raycache/store)")
    p.add_argument("--epochs", type=int, help="epochs to train (default: training's defaults, "
                                              "a solved head or epochs until a plateau)")
    p.add_argument("--workers", type=_workers, default="auto",
                   help="DDP workers; 0 trains in-process; auto picks by cache size")
    p.add_argument("--no-progress", action="store_true",
                   help="print no progress bars or per-epoch lines")
    add_evaluate(sub)
    add_serving(sub)
    return parser


EXAMPLES = {"fill": "rows_per_shard=512", "train": "optim.lr=1e-3 or loop.epochs=5",
            "pipeline": "train.optim.lr=1e-3", "predict": "pool.batch_size=64",
            "probe": "methods=[logreg,knn] or logreg.C=[0.1,1,10]"}
"""An example of --set per command."""


def _overrides(p: argparse.ArgumentParser, example: str, what: str = "the config") -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help=f"override a setting of {what} (repeatable): KEY dotted into its "
                        f"groups, VALUE read as YAML, e.g. {example}")


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (raycache._scripting.EXIT_CODES; argparse exits 2)."""
    args = build_parser().parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = one_line(shown, args.command)
    try:
        return COMMANDS[args.command](args)
    except RaycacheError as exc:
        print(f"raycache {args.command}: error: {exc}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:  # one line, not Ray's and torch's tracebacks
        print(interrupted(args.command), file=sys.stderr)
        return 130
    except Exception:  # a crash: the traceback, and a code of its own
        import traceback

        traceback.print_exc()
        print(f"raycache {args.command}: crashed (exit code {CRASH}); the traceback is above",
              file=sys.stderr)
        return CRASH
    finally:
        warnings.showwarning = shown


def _store(uri: str):
    """The store a command reads, checked: reachable, and a folder (StoreError, with the fix,
    rather than the filesystem's own error)."""
    from raycache._cache.store import Store

    store = Store(uri)
    store.check_reachable()
    store.check_folder()
    return store


def _fill(args: argparse.Namespace) -> int:
    from raycache._fill.run import fill

    store_folder(args.store)
    config = overridden(config_arg(args.config), args.overrides, args.store)
    print(fill(config, progress=not args.no_progress).summary())
    return 0


def _train(args: argparse.Namespace) -> int:
    from raycache._train.run import train

    store_folder(args.store)
    config = overridden(config_arg(args.config), args.overrides, args.store, flat=("sweep",))
    _print_history(train(config, progress=not args.no_progress))
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    from raycache._pipeline import pipeline

    store_folder(args.store)
    config = overridden(config_arg(args.config), args.overrides, args.store,
                        ("fill.store", "train.store"), flat=("train.sweep",))
    _print_history(pipeline(config, progress=not args.no_progress).train)
    return 0


def _probe(args: argparse.Namespace) -> int:
    from raycache._probe.run import probe

    store_folder(args.store)
    result = probe(overridden(config_arg(args.config), args.overrides, args.store,
                              flat=("linear.sweep", "mlp.sweep")), progress=not args.no_progress)
    print(result.table.drop(columns=["seconds"]).to_string(index=False))
    print(result.summary())
    return 0


def _predict(args: argparse.Namespace) -> int:
    from raycache._predict.run import predict_file
    from raycache._train.runs import checkpoint_of

    flags = {"auto": "auto", "true": True, "false": False}
    config = overridden({"checkpoint": args.checkpoint, "input": args.input,
                         "output": args.output, "keep": args.keep, "overwrite": args.overwrite,
                         "in_process": flags[args.in_process], "pool": {"num_gpus": args.num_gpus}},
                        args.overrides)
    config["checkpoint"] = checkpoint_of(config["checkpoint"], config.get("options"))
    with flags_named(PREDICT_FLAGS):
        print(predict_file(config, progress=not args.no_progress).summary())
    return 0


def _print_history(result) -> None:
    """The run's summary alone: the loop printed each epoch as it ran (never again here), and
    --no-progress asks for no epoch lines; the summary headlines the served epoch's metrics."""
    print(result.summary())


def _ls(args: argparse.Namespace) -> int:
    from raycache._cache.finding import ls
    from raycache._cache.manifest import human_bytes

    caches = ls(_store(args.store))
    if args.json:
        print_json([{**c.manifest.head(), "rows": c.manifest.rows, "bytes": c.manifest.bytes,
                     "shard_count": c.manifest.shard_count, "uri": c.uri} for c in caches])
        return OK
    if not caches:
        print(f"no committed caches in {args.store}")
    for c in caches:
        m = c.manifest
        encs = ",".join(f"{e.name}:{e.dim}" for e in m.encoders)
        skipped = f"  skipped={len(m.skipped)}" if m.skipped else ""
        print(f"{m.name}/{m.fingerprint}  rows={m.rows}{skipped}  size={human_bytes(m.bytes)}  "
              f"encoders={encs}  created={m.created}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from raycache._cache.finding import open_cache

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
    for f in m.inputs["source"]["files"]:  # files, or data in memory (by its content)
        pinned = f", object version {f['version_id']}" if f.get("version_id") else ""
        print(f"source       {f['uri']} ({f['size']} bytes, version {f['version']}{pinned})"
              if "uri" in f else f"source       data in memory ({f.get('data', '?')}, "
              f"{f.get('rows', '?')} rows, sha256 {str(f.get('sha256', '?'))[:16]})")
    if m.skipped:
        print(f"skipped      {len(m.skipped)} source row(s) the fill could not cache "
              "(on_bad_rows: skip; the next fill retries them):")
    for s in m.skipped[:SKIPPED_SHOWN]:
        print(f"  {m.key_column}={s.key!r}  row {s.row} of {s.source}: {s.reason}")
    if len(m.skipped) > SKIPPED_SHOWN:
        print(f"  ... and {len(m.skipped) - SKIPPED_SHOWN} more (--json lists them all)")
    return 0


def _gpus(text: str) -> float | str:
    return text if text == "auto" else float(text)


def _repair(args: argparse.Namespace) -> int:
    from raycache._upkeep.repair import repair

    name, _, fp = args.cache.partition("/")
    print(repair(name, _store(args.store), fp or None, progress=not args.no_progress).summary())
    return 0


def _compact(args: argparse.Namespace) -> int:
    from raycache._upkeep.compact import compact

    name, _, fp = args.cache.partition("/")
    print(compact(name, _store(args.store), fp or None, below=args.below,
                  progress=not args.no_progress).summary())
    return 0


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _runs(args: argparse.Namespace) -> int:
    from raycache._cache.finding import open_cache
    from raycache._train.runs import list_runs

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, _store(args.store), fp or None)
    runs = list_runs(cache)
    if args.json:
        print_json(runs)
        return OK
    if not runs:
        print(f"no training runs of {cache.name}/{cache.fingerprint[:12]} in {args.store}")
    for run in runs:
        print(run.line())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from raycache._cache.finding import open_cache
    from raycache._upkeep.verify import verify

    name, _, fp = args.cache.partition("/")
    report = verify(open_cache(name, _store(args.store), args.fingerprint or fp or None))
    for line in [] if args.json else report.lines():
        print(line)
    if report.shared:
        print(f"{report.cache}: {len(report.bad)} of {report.shards} shards bad, "
              f"{len(report.shared)} of them shared from older versions "
              f"({', '.join(sorted(set(report.shared.values())))}); `raycache repair "
              f"{report.cache} --store {args.store}` says how to fill it again", file=sys.stderr)
    elif not report.ok:
        print(f"{report.cache}: {len(report.bad)} of {report.shards} shards bad; re-encode them "
              f"with `raycache repair {name} --store {args.store}`", file=sys.stderr)
    if args.json:
        print_json(report)
    return OK if report.ok else DAMAGED


def _du(args: argparse.Namespace) -> int:
    from raycache._cache.manifest import human_bytes
    from raycache._upkeep.du import du

    found = du(_store(args.store))
    if args.json:
        print_json(found)
        return OK
    for u in found:
        print(u.line())
    total = sum(u.bytes for u in found)
    print(f"total {human_bytes(total)} ({total} bytes) in {len(found)} cache folder(s) of "
          f"{args.store}")
    return 0


def _gc(args: argparse.Namespace) -> int:
    from raycache._upkeep.gc import gc

    with flags_named(GC_FLAGS):
        result = gc(_store(args.store), keep_last=args.keep_last, older_than=args.older_than,
                    max_size=args.max_size, grace=args.grace, delete=args.delete,
                    include_newest=args.include_newest, damaged=args.damaged,
                    keep_runs=args.keep_runs)
    for line in [] if args.json else result.lines():
        print(line)
    if args.json:
        print_json(result)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from raycache._demo import run

    run(store=args.store, epochs=args.epochs, workers=args.workers,
        progress=not args.no_progress)
    return 0


COMMANDS = {
    "fill": _fill, "train": _train, "pipeline": _pipeline, "probe": _probe, "predict": _predict,
    "evaluate": run_evaluate, "ls": _ls, "inspect": _inspect, "repair": _repair,
    "compact": _compact, "runs": _runs, "verify": _verify, "du": _du, "gc": _gc, "demo": _demo,
    "export": lambda args: export(args, _store(args.store)), **SERVING_COMMANDS,
}
