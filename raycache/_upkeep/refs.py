"""Which cache folders' files committed versions read (format 5: a version may share the shard
files of an older version's folder), so that upkeep removes only what no kept version reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from raycache._cache.manifest import Manifest
from raycache._cache.records import ShardEntry
from raycache._errors import CorruptCache

__all__ = ["Refs", "folder_of", "label", "references"]

Refs = dict[str, dict[str, set[str]]]
"""Folder id ("name/fingerprint") -> path relative to it -> ids of the versions that read it."""


def folder_of(manifest: Manifest, entry: ShardEntry) -> str:
    """The id of the folder that holds an entry's file."""
    return entry.home or f"{manifest.name}/{manifest.fingerprint}"


def label(entry: ShardEntry) -> str:
    """A name for an entry's file that no other version's file has: its path for a file of
    the cache's own folder, "<home>/<path>" for a shared one."""
    return f"{entry.home}/{entry.path}" if entry.home else entry.path


def references(manifests: Iterable[Manifest]) -> Refs:
    """Every shard file the manifests read, by the folder that holds it. A manifest whose shard
    list cannot be read names none (its version cannot be read either: it is filled again)."""
    out: Refs = defaultdict(lambda: defaultdict(set))
    for m in manifests:
        try:
            entries = list(m.shards)
        except CorruptCache:
            continue
        for e in entries:
            out[folder_of(m, e)][e.path].add(f"{m.name}/{m.fingerprint}")
    return out
