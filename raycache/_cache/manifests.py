"""A committed manifest read from a cache folder, its shard list read and checked on first use;
the error that names a damaged one and the fix."""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from typing import Any

from raycache._cache.confined import BadEntry, file_name_problem
from raycache._cache.manifest import Manifest
from raycache._cache.outside import KEPT_ROWS
from raycache._cache.reads import cache_label, read_bytes_checked
from raycache._cache.records import ShardEntry
from raycache._cache.store import MANIFEST, Store
from raycache._errors import CorruptCache, CorruptShard

__all__ = ["PARSED_LISTS", "damaged", "read_manifest"]


def read_manifest(store: Store, cache_dir: str) -> Manifest | None:
    """The committed manifest of a cache folder (its shard list read on first use), or None;
    CorruptCache where it cannot be read, naming the file and the fix."""
    path = f"{cache_dir}/{MANIFEST}"
    try:
        raw = store.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):  # no manifest, or not a folder at all
        return None
    except IsADirectoryError:
        raise damaged(store, cache_dir, MANIFEST, "is a folder") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # truncated, not JSON, not UTF-8
        raise damaged(store, cache_dir, MANIFEST, f"is not JSON ({exc})") from None
    try:
        manifest = Manifest.from_dict(data, where=store.url(path),
                                      shards=functools.partial(_shard_list, store, cache_dir))
    except CorruptCache as exc:  # an inline shard entry it cannot take among them
        why = str(exc).removeprefix(exc.uri).strip().split("; fill")[0]
        raise damaged(store, cache_dir, MANIFEST, why) from None
    kept = manifest.extra.get(KEPT_ROWS)
    if isinstance(kept, dict) and (why := file_name_problem("kept-rows list", kept.get("path"))):
        raise damaged(store, cache_dir, MANIFEST, why)
    return manifest


def damaged(store: Store, cache_dir: str, rel: str, why: str) -> CorruptCache:
    """The error for a cache whose manifest or shard list (`rel`) cannot be read: the file,
    why, and the fix (a fill again, a repair, or gc's --damaged)."""
    label = cache_label(cache_dir)
    uri = store.url(f"{cache_dir}/{rel}")
    if rel == MANIFEST:
        fix = ("fill it again with the config it was filled from (the fill replaces the "
               "damaged manifest)")
        what = "its manifest"
    else:
        fix = (f"re-encode it with `raycache repair {label} --store {store.uri}` (while its "
               "source is as it was filled from; a fill of a changed source passes it by)")
        what = "its shard list"
    return CorruptCache(
        f"cache {label} is damaged: {what} {uri} {why}. Reads of it fail, and listings, gc "
        f"and other fills pass it by, until it is fixed: {fix}, or remove it with "
        f"`raycache gc --store {store.uri} --damaged --delete`.", uri, label)


PARSED_LISTS = 64
"""Shard lists kept parsed, by their sha256 (a list is immutable and named by its content; its
bytes are still read and checked on every open): a process that fills version after version
parses each list once."""
_PARSED: OrderedDict[str, list[ShardEntry]] = OrderedDict()


def _shard_list(store: Store, cache_dir: str, info: dict[str, Any]) -> list[ShardEntry]:
    """A format 3 manifest's shard list, checked against the size and sha256 it records
    (CorruptCache where it is missing, does not match, or holds no shard entries)."""
    rel = str(info.get("path", "shards-?.json")) if isinstance(info, dict) else "shards-?.json"
    if isinstance(info, dict) and "path" in info and (
            why := file_name_problem("shard list", info["path"])):  # never read outside it
        raise damaged(store, cache_dir, MANIFEST, why)
    try:
        blob = read_bytes_checked(store, f"{cache_dir}/{rel}", info["bytes"], info["sha256"],
                                  cache_label(cache_dir))
        if info["sha256"] in _PARSED:  # these very bytes were parsed before
            _PARSED.move_to_end(info["sha256"])
            return _PARSED[info["sha256"]]
        data = _entries(json.loads(blob))  # every entry parses, and is checked
    except BadEntry as exc:
        raise damaged(store, cache_dir, rel, str(exc)) from None
    except CorruptShard as exc:
        why = "is missing" if exc.problems == ("missing",) else (
            f"does not match the manifest's record of it: {'; '.join(exc.problems)}")
        raise damaged(store, cache_dir, rel, why) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise damaged(store, cache_dir, rel, f"is not a shard list ({type(exc).__name__}: "
                      f"{exc})") from None
    _PARSED[info["sha256"]] = data
    while len(_PARSED) > PARSED_LISTS:
        _PARSED.popitem(last=False)
    return data


SHOWN = 3
"""Bad entries of a shard list its error names (the rest counted)."""


def _entries(items: list[Any]) -> list[ShardEntry]:
    """A shard list's entries, each checked (raycache._cache.confined); BadEntry naming the bad
    ones (their place in the list and what is wrong) where any is."""
    out, bad = [], []
    for i, item in enumerate(items):
        try:
            out.append(ShardEntry.from_json(item))
        except BadEntry as exc:
            where = "/".join(str(item[k]) for k in ("home", "path") if item.get(k))
            bad.append(f"entry {i} ({where}): {exc}")
    if bad:
        more = f", and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise BadEntry(f"has {len(bad)} bad entr{'y' if len(bad) == 1 else 'ies'} of "
                       f"{len(items)}: {'; '.join(bad[:SHOWN])}{more}")
    return out
