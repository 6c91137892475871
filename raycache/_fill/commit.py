"""The commit of a fill: resume records, completeness, the key and label scan, the manifest."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from raycache._cache.columns import input_column
from raycache._cache.entry_rows import folder_of, folder_path, is_shared
from raycache._cache.finding import scan as scan_versions
from raycache._cache.manifest import LABEL_PROBLEMS, SKIPPED, EncoderEntry, Manifest
from raycache._cache.manifests import read_manifest
from raycache._cache.order import HISTORY, Place
from raycache._cache.outside import KEPT_ROWS, KEPT_ROWS_FILE, kept_rows_blob
from raycache._cache.records import ShardEntry, ShardRecord, SkippedRow, spans_by_block
from raycache._cache.store import MANIFEST, PROGRESS, SHARDS, Store, shard_name
from raycache._core.caller import warn
from raycache._core.secrets import split
from raycache._errors import CorruptCache, RaycacheError, StoreError
from raycache._fill.keys import label_problems, named, scan
from raycache._fill.nan_labels import nan_problems
from raycache._fill.plan import Plan
from raycache._fill.summary import KeySummary
from raycache._source.files import Ranges, Span

__all__ = ["SHARD_LIST", "check_complete", "check_shared", "clear_progress", "commit",
           "counted", "done_ranges", "manifest_of", "missing", "place", "resumable", "scan_keys",
           "superseded"]

SHARD_LIST = re.compile(r"shards-[0-9a-f]{16}\.json")
"""The name of a shard list object in a cache folder."""


def resumable(p: Plan) -> list[ShardRecord]:
    """Records of the shards an earlier, interrupted fill of this fingerprint wrote, each
    trusted only when its shard is there with the size it records (a record written before a
    crash can describe other bytes; its rows are then encoded again)."""
    sizes = {path: size for path, (size, _) in p.store.files(f"{p.dir}/{SHARDS}").items()}
    sizes = {f"{SHARDS}/{path.rsplit('/', 1)[-1]}": size for path, size in sizes.items()}
    out = []
    for name in p.store.listdir(f"{p.dir}/{PROGRESS}"):
        if name.endswith(".json"):
            path = f"{p.dir}/{PROGRESS}/{name}"
            try:  # another fill of this cache may commit (and clear the records) meanwhile
                record = ShardRecord.from_json(p.store.read_json(path))
            except FileNotFoundError:
                continue
            except (ValueError, TypeError, KeyError) as exc:  # damaged: its rows are encoded
                warn(f"progress record {p.store.url(path)} cannot be read ({exc}); "
                     "its shard's rows are encoded again")
                continue
            if sizes.get(record.path) == record.bytes:
                out.append(record)
    return out


def done_ranges(records: list[ShardRecord]) -> dict[str, Ranges]:
    """The source rows that `records` hold, per file block: what the fill need not read."""
    by_block: dict[str, list[Span]] = defaultdict(list)
    for r in records:
        for x in r.ranges:
            by_block[x.block].append(Span(x.start, x.stop))
    return {k: tuple(sorted(v)) for k, v in by_block.items()}


def check_complete(p: Plan, records: list[ShardRecord], totals: dict[str, int],
                   shared: Sequence[ShardEntry] = (), skipped: Sequence[SkippedRow] = ()
                   ) -> None:
    """Every row of every source file in exactly one shard (its own, or one it `shared` with
    an older version) or `skipped` (on_bad_rows: skip), or no manifest."""
    for r in records:
        for x in r.ranges:
            totals.setdefault(x.block, x.source_rows or 0)
    spans = spans_by_block(records, shared, skipped)
    bad = []
    for f in p.files:
        a, b = spans.get(f.block, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        order = np.argsort(a, kind="stable")
        a, b = a[order], b[order]
        if (a[1:] < b[:-1]).any() or int((b - a).sum()) != totals.get(f.block, 0):
            bad.append(f.uri)
    if bad:
        raise RaycacheError(
            f"fill of {p.cfg.name}/{p.fingerprint} wrote incomplete or overlapping shards for "
            f"{bad}; no manifest was written. Run the fill again: it resumes and encodes only "
            "the missing rows"
        )


def counted(p: Plan) -> list[str]:
    """The label columns whose values the manifest counts: integer and named ones."""
    return [c for c in p.cfg.source.labels
            if pa.types.is_integer(t := p.schema.field(c).type) or named(t)]


def scan_keys(p: Plan, records: list[ShardRecord], *, cluster: bool = False, raw: bool = False,
              summaries: dict[str, KeySummary] | None = None
              ) -> tuple[list[ShardRecord], dict[str, Any]]:
    """(records, label stats): duplicate keys handled as the config says, integer and named
    labels counted (raycache._fill.keys: from the writers' `summaries` where given; else on the
    cluster for a large fill that ran there); with `raw`, the counts per value instead of their
    stats."""
    src = p.cfg.source
    return scan(p.store, p.dir, records, src.key, src.duplicates, counted(p), p.cfg.name,
                cluster=cluster, raw=raw, summaries=summaries)


def commit(p: Plan, records: list[ShardRecord], seconds: float, replace: bool = False,
           label_stats: dict[str, Any] | None = None, shared: Sequence[ShardEntry] = (),
           dims: dict[str, int] | None = None, skipped: Sequence[SkippedRow] = ()
           ) -> tuple[Manifest, bool]:
    """Write the manifest, exclusively: (the manifest, True), or, when another fill of the same
    cache committed first, (that fill's manifest, False). `replace` writes over it (repair).
    `shared`: entries of older versions' shards the version shares; `skipped`: the rows left
    out (on_bad_rows: skip), listed in the manifest."""
    check_shared(p, shared)  # gc may have removed one since the version was planned
    manifest = manifest_of(p, records, seconds, label_stats, shared, dims)
    manifest.extra[HISTORY] = place(p, manifest.created)
    if skipped:
        manifest.extra[SKIPPED] = [s.to_json() for s in sorted(
            skipped, key=lambda s: (s.source, s.row))]
    # the shard list first, named by its content (two fills of one cache write the same
    # object), then the manifest that names it and its checksum: the commit
    listing = (json.dumps([s.to_json() for s in manifest.shards], sort_keys=True,
                          separators=(",", ":")) + "\n").encode()
    digest = hashlib.sha256(listing).hexdigest()
    manifest.shard_list = {"path": f"shards-{digest[:16]}.json", "bytes": len(listing),
                           "sha256": digest}
    manifest.totals = {"rows": manifest.rows, "bytes": manifest.bytes,
                       "shards": len(manifest.shards)}
    p.store.write_atomic(f"{p.dir}/{manifest.shard_list['path']}", listing)
    kept = kept_rows_blob(p.cfg.name, p.fingerprint, manifest.shards)  # for outside readers
    if kept is not None:
        blob, manifest.extra[KEPT_ROWS] = kept
        p.store.write_atomic(f"{p.dir}/{manifest.extra[KEPT_ROWS]['path']}", blob)
    committed = p.store.write_json(f"{p.dir}/{MANIFEST}", manifest.head(), exclusive=not replace)
    if not committed:
        try:
            manifest = read_manifest(p.store, p.dir)
        except CorruptCache:  # not a commit to defer to: this one replaces it
            committed = p.store.write_json(f"{p.dir}/{MANIFEST}", manifest.head())
    clear_progress(p)
    for path in superseded(p, manifest):
        with contextlib.suppress(FileNotFoundError):
            p.store.rm(f"{p.dir}/{path}")
    named = {manifest.shard_list.get("path"), manifest.extra.get(KEPT_ROWS, {}).get("path")}
    for name in p.store.listdir(p.dir):  # a repair's earlier shard list, or a losing fill's
        if (SHARD_LIST.fullmatch(name) or KEPT_ROWS_FILE.fullmatch(name)) and name not in named:
            p.store.rm(f"{p.dir}/{name}")  # never another fill's temporary file: it renames it
    return manifest, committed


def missing(store: Store, entries: Sequence[ShardEntry]) -> list[ShardEntry]:
    """The shared entries whose file is gone or of another size (one listing per folder)."""
    by_home: dict[str, list[ShardEntry]] = defaultdict(list)
    for e in entries:
        by_home[folder_of(e)].append(e)
    out = []
    for home, group in by_home.items():
        folder = store.path(home)
        there = {path[len(folder) + 1:]: size
                 for path, (size, _) in store.files(f"{folder}/{SHARDS}").items()}
        out += [e for e in group if there.get(e.path) != e.bytes]
    return out


def check_shared(p: Plan, shared: Sequence[ShardEntry]) -> None:
    """Every file of older versions that the version shares still there, just before its
    commit: a StoreError naming those gone and the fix where one is not, nothing committed."""
    gone = missing(p.store, [e for e in shared if is_shared(e)])
    if gone:
        raise StoreError(
            f"fill {p.cfg.name}/{p.fingerprint}: {len(gone)} shard file(s) it shares from older "
            f"version(s) {', '.join(sorted({folder_of(e) for e in gone}))} were removed while it "
            f"ran (by `raycache gc`, or by hand), e.g. "
            f"{p.store.url(folder_path(p.store, '', gone[0]))}/{gone[0].path}; nothing was "
            "committed. Run the fill again: it encodes their rows anew, and keeps the shards it "
            "wrote")


def place(p: Plan, now: str) -> dict:
    """The version's place in its name's history (raycache._cache.order): the one its earlier
    commit recorded (a repair, a compaction, a retry of skipped rows: never moved), else one
    past the name's newest."""
    try:
        previous = read_manifest(p.store, p.dir)
    except CorruptCache:  # its place is not known: a new one
        previous = None
    if previous is not None:
        return next_place(previous, (), now)
    others, _ = scan_versions(p.store, p.cfg.name)
    return next_place(None, [c.manifest.place for c in others if c.fingerprint != p.fingerprint],
                      now)


def superseded(p: Plan, manifest: Manifest) -> list[str]:
    """Shards that a committed shard was rewritten from (duplicate keys dropped) and that are
    still there: the manifest names the rewritten one, never them."""
    own = [s for s in manifest.shards if not is_shared(s)]
    named = {s.path for s in own}
    there = set(p.store.listdir(f"{p.dir}/{SHARDS}"))
    out = []
    for s in own:
        if s.ranges and s.path != (base := shard_name(s.ranges)) and base not in named \
                and base.rsplit("/", 1)[-1] in there:
            out.append(base)
    return out


def _in_order(p: Plan, own: list[ShardEntry], shared: Sequence[ShardEntry]
              ) -> list[ShardEntry]:
    """A version's entries, own and shared, by the source file (in listing order) and row of
    their first rows; a cache without shared entries keeps its records' order."""
    if not shared:
        return own
    place = {f.block: i for i, f in enumerate(p.files)}
    return sorted([*own, *shared], key=lambda e: (place.get(e.ranges[0].block, len(place)),
                                                 e.ranges[0].start) if e.ranges else (-1, 0))


def clear_progress(p: Plan, attempts: int = 3) -> None:
    """Remove the progress records once committed. Another fill of the same cache may still be
    writing records while they go (the folder is not empty again): retry, then leave them; they
    are inert beside a manifest and the last fill to commit clears them."""
    for _ in range(attempts):
        try:
            p.store.fs.rm(f"{p.dir}/{PROGRESS}", recursive=True)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def manifest_of(p: Plan, records: list[ShardRecord], seconds: float,
                label_stats: dict[str, Any] | None = None, shared: Sequence[ShardEntry] = (),
                dims: dict[str, int] | None = None) -> Manifest:
    """The manifest of the shards `records` and the `shared` entries of older versions (in
    source order of their first rows), not written; `dims`, each encoder's size where no
    record says it."""
    from raycache._fill.reuse import encoder_identity

    records = sorted(records, key=ShardRecord.order)
    dims = (records[0].dims or {}) if records else dims or {}
    described = p.inputs["encoders"]
    return Manifest(
        name=p.cfg.name,
        fingerprint=p.fingerprint,
        inputs=p.inputs,
        encoders=[
            EncoderEntry(
                name=e.name,
                kind=e.kind,
                input=e.input,
                dim=int(dims.get(e.name) or described[e.name].get("dim") or 0),
                dtype=e.dtype,
                weights_digest=described[e.name]["weights_digest"],
                identity="" if e.trainable else encoder_identity(described[e.name]),
                trainable=e.trainable,
                column=input_column(e.name) if e.trainable else "",
            )
            for e in p.cfg.encoders
        ],
        key_column=p.cfg.source.key,
        label_columns=list(p.cfg.source.labels),
        label_types={c: str(p.schema.field(c).type) for c in p.cfg.source.labels},
        shards=_in_order(p, [r.entry() for r in records], shared),
        created=datetime.now(UTC).isoformat(timespec="milliseconds"),
        fill_seconds=round(seconds, 3),
        extra={"encoder_configs": {e.name: {**dataclasses.asdict(e), "options": split(e.options)[0]}
                                   for e in p.cfg.encoders},  # never their credentials
               **({"views": p.inputs["views"]} if "views" in p.inputs else {}),
               **({LABEL_PROBLEMS: found} if (found := [
                   *label_problems(label_stats or {}),
                   *nan_problems(p.store, p.dir, records, p.cfg.source.key,
                                 {c: p.schema.field(c).type for c in p.cfg.source.labels})])
                  else {})},
        label_stats=label_stats or {},
    )


def next_place(previous: Manifest | None, others: Iterable[Place], now: str) -> dict:
    """The `extra[HISTORY]` record of a commit: the one the version's earlier commit wrote
    (`previous`, its manifest; one without a record keeps its `created` as its first commit,
    sequence 0), or, at a version's first commit, one past the highest sequence of the name's
    other versions (`others`), first committed `now`."""
    if previous is not None:
        rec = previous.extra.get(HISTORY)
        first = rec.get("first_committed") if isinstance(rec, dict) else None
        return {"sequence": previous.place.sequence,
                "first_committed": first or previous.created}
    return {"sequence": 1 + max((p.sequence for p in others), default=0),
            "first_committed": now}
