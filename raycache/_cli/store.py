"""The command line's store-reading commands: ls, inspect, du (and the checked store every store
command opens, the --store help text)."""

from __future__ import annotations

import argparse
import json

from raycache._cache.config import default_store
from raycache._cli.command import Command
from raycache._cli.scripting import OK, add_json, print_json

__all__ = ["CACHE_HELP", "COMMANDS", "STORE_HELP", "cache_options", "checked_store"]

STORE_HELP = ("store URI: a folder, s3://bucket/prefix or any fsspec URI (default: "
              "$RAYCACHE_STORE, else .raycache/store)")
CACHE_HELP = "cache name, or NAME/FINGERPRINT (default fingerprint: the newest)"
SKIPPED_SHOWN = 20
"""Skipped rows `raycache inspect` lists (--json: all)."""


def checked_store(uri: str):
    """The store a command reads, checked: reachable, and a folder (StoreError, with the fix,
    rather than the filesystem's own error)."""
    from raycache._cache.store import Store

    store = Store(uri)
    store.check_reachable()
    store.check_folder()
    return store


def cache_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A command on one cache: its CACHE argument and --store."""
    p.add_argument("cache", help=CACHE_HELP)
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    return p


def ls_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", nargs="?", default=argparse.SUPPRESS, metavar="STORE",
                   help="the same as --store")
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    add_json(p)


def inspect_options(p: argparse.ArgumentParser) -> None:
    add_json(cache_options(p), "the whole manifest")


def du_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=default_store(), help=STORE_HELP)
    add_json(p)


def ls(args: argparse.Namespace) -> int:
    from raycache._cache.finding import ls as find
    from raycache._cache.manifest import human_bytes

    caches = find(checked_store(args.store))
    if args.json:
        print_json([{**c.manifest.head(), "rows": c.manifest.rows, "bytes": c.manifest.bytes,
                     "shard_count": c.manifest.shard_count, "uri": c.uri} for c in caches])
        return OK
    if not caches:
        print(f"no committed caches in {args.store}")
        return OK
    from raycache._cli.tables import print_table

    rows = [[f"{m.name}/{m.fingerprint}", m.rows, len(m.skipped), human_bytes(m.bytes),
             ",".join(f"{e.name}:{e.dim}" for e in m.encoders), m.created]
            for m in (c.manifest for c in caches)]
    print_table(["cache", "rows", "skipped", "size", "encoders", "created"], rows, plain=[
        f"{cache}  rows={n}{f'  skipped={skipped}' if skipped else ''}  size={size}  "
        f"encoders={encs}  created={created}" for cache, n, skipped, size, encs, created in rows])
    return OK


def inspect(args: argparse.Namespace) -> int:
    from raycache._cache.finding import open_cache

    name, _, fp = args.cache.partition("/")
    cache = open_cache(name, checked_store(args.store), fp or None)
    m = cache.manifest
    if args.json:
        print(json.dumps(m.to_dict(), indent=2, sort_keys=True))
        return OK
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
    return OK


def du(args: argparse.Namespace) -> int:
    from raycache._cache.manifest import human_bytes
    from raycache._upkeep.du import du as usage

    found = usage(checked_store(args.store))
    if args.json:
        print_json(found)
        return OK
    from raycache._cli.tables import print_table

    print_table(["cache folder", "state", "rows", "shards", "size", "runs", "created", "notes"],
                [[u.id, u.state, "-" if u.rows is None else u.rows, u.shards,
                  human_bytes(u.bytes), human_bytes(u.runs_bytes), u.created,
                  u.notes().strip()] for u in found],
                plain=[u.line() for u in found])
    total = sum(u.bytes for u in found)
    print(f"total {human_bytes(total)} ({total} bytes) in {len(found)} cache folder(s) of "
          f"{args.store}")
    return OK


COMMANDS = (
    Command("ls", "list the committed caches in a store", ls_options, ls),
    Command("inspect", "print a cache's manifest", inspect_options, inspect),
    Command("du", "bytes, rows and shards of every cache folder in a store", du_options, du),
)
