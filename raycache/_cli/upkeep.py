"""The command line's upkeep commands: verify, repair, compact and gc."""

from __future__ import annotations

import argparse
import sys

from raycache._cache.config import default_store
from raycache._cli.command import Command
from raycache._cli.scripting import DAMAGED, OK, add_json, print_json, summary
from raycache._cli.store import STORE_HELP, cache_options, checked_store
from raycache._cli.words import GC_FLAGS, TRUST_HELP, flags_named, old_flag

__all__ = ["COMMANDS"]


def repair_options(p: argparse.ArgumentParser) -> None:
    cache_options(p)
    p.add_argument("--no-progress", action="store_true", help="print no progress bar")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    add_json(p)


def verify_options(p: argparse.ArgumentParser) -> None:
    add_json(cache_options(p))
    p.add_argument("--fingerprint", help="this fill (default: the newest)")


def compact_options(p: argparse.ArgumentParser) -> None:
    cache_options(p)
    p.add_argument("--below", type=float, default=None,
                   help="compact shared shards that keep less than this fraction of their rows "
                        "(default: the fill's compact_below, 0.9)")
    p.add_argument("--no-progress", action="store_true", help="print no progress bar")
    p.add_argument("--trust-code", action="store_true", help=TRUST_HELP)
    add_json(p)


def gc_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    p.add_argument("--retain", type=int, metavar="N",
                   help="remove committed fingerprints beyond the newest N of each name")
    old_flag(p, "--keep-last", "--retain", type=int, metavar="N")
    p.add_argument("--older-than", help="remove fingerprints first committed longer ago (7d)")
    p.add_argument("--max-size", help="remove the oldest until the caches fit, e.g. 50GB")
    p.add_argument("--grace", default="24h",
                   help="unfinished fills untouched for this long are removed; a cache whose run "
                   "died with a checkpoint is kept this long, to resume (default 24h, or 0)")
    p.add_argument("--include-newest", action="store_true", help="a name's newest may go too")
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--remove-runs", action="store_true",
                      help="the trained heads (runs/) of the cache folders it removes go too "
                      "(else kept)")
    runs.add_argument("--keep-runs", action="store_true",
                      help="keep those trained heads: the default, named for older scripts")
    p.add_argument("--delete", action="store_true", help="remove; without it, only list")
    p.add_argument("--damaged", action="store_true",
                   help="caches whose manifest or shard list cannot be read go too (else kept)")
    add_json(p)


def repair(args: argparse.Namespace) -> int:
    from raycache._upkeep.repair import repair as run

    name, _, fp = args.cache.partition("/")
    with summary(args.json) as out:
        out(run(name, checked_store(args.store), fp or None, progress=not args.no_progress,
                trust_code=args.trust_code))
    return OK


def compact(args: argparse.Namespace) -> int:
    from raycache._upkeep.compact import compact as run

    name, _, fp = args.cache.partition("/")
    with summary(args.json) as out:
        out(run(name, checked_store(args.store), fp or None, below=args.below,
                progress=not args.no_progress, trust_code=args.trust_code))
    return OK


def verify(args: argparse.Namespace) -> int:
    from raycache._cache.finding import open_cache
    from raycache._upkeep.verify import verify as run

    name, _, fp = args.cache.partition("/")
    report = run(open_cache(name, checked_store(args.store), args.fingerprint or fp or None))
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


def gc(args: argparse.Namespace) -> int:
    from raycache._upkeep.gc import gc as run

    with flags_named(GC_FLAGS):
        result = run(checked_store(args.store), retain=args.retain,
                     older_than=args.older_than, max_size=args.max_size, grace=args.grace,
                     delete=args.delete, include_newest=args.include_newest,
                     damaged=args.damaged, keep_runs=not args.remove_runs)
    for line in [] if args.json else result.lines():
        print(line)
    if args.json:
        print_json(result)
    return OK


COMMANDS = (
    Command("repair", "re-encode a cache's bad or missing shards from its source",
            repair_options, repair),
    Command("verify", "check every shard of a cache against its manifest", verify_options,
            verify),
    Command("compact", "copy a version's sparse or small shared shards' kept rows into its own "
                       "shards (nothing encoded), so its reads stay at memory speed",
            compact_options, compact),
    Command("gc", "remove unfinished fills and old fingerprints (dry run unless --delete)",
            gc_options, gc),
)
