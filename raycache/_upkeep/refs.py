"""Which cache folders' files committed versions read (format 5: a version may share the shard
files of an older version's folder), so that upkeep removes only what no kept version reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from raycache._cache.entry_rows import folder_of
from raycache._cache.manifest import Manifest
from raycache._errors import CorruptCache

__all__ = ["Refs", "references"]

Refs = dict[str, dict[str, set[str]]]
"""Folder id ("name/fingerprint") -> path relative to it -> ids of the versions that read it."""


def references(manifests: Iterable[Manifest]) -> Refs:
    """Every shard file the manifests read, by the folder that holds it. A manifest whose shard
    list cannot be read names none (its version cannot be read either: it is filled again)."""
    out: Refs = defaultdict(lambda: defaultdict(set))
    for m in manifests:
        try:
            entries = list(m.shards)
        except CorruptCache:
            continue
        me = f"{m.name}/{m.fingerprint}"
        for e in entries:
            out[folder_of(e, me)][e.path].add(me)
    return out
