"""raycache verify: every shard of a committed cache checked against its manifest, and its keys."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.entry_rows import (
    file_path,
    folder_of,
    is_shared,
    label,
    selection_problems,
)
from raycache._cache.manifest import Manifest, human_bytes
from raycache._cache.reads import THREADS, map_ordered, mismatch
from raycache._cache.records import ShardEntry, SkippedRow
from raycache._cache.store import Store
from raycache._cache.vectors import is_packed, unpacked_type
from raycache._errors import CorruptCache, StoreUnavailable

if TYPE_CHECKING:
    from raycache._cache.committed import Cache

__all__ = ["Duplicates", "Report", "verify"]

EXAMPLES = 5
"""Duplicate keys a report names."""


@dataclass
class Duplicates:
    """Keys held by more than one row of a cache.

    Example:
        ```python
        duplicates = raycache.verify(raycache.open_cache("docs")).duplicate_keys
        print(duplicates.count, list(duplicates.examples)[:3])
        ```
    """

    count: int = 0
    """Distinct keys that appear more than once."""
    examples: dict[Any, list[str]] = field(default_factory=dict)
    """A few of them, each with the shards (as Report.bad names them) that hold it."""


@dataclass
class Report:
    """What verify found: every bad shard with its reasons, and duplicate keys.

    Example:
        ```python
        report = raycache.verify(raycache.open_cache("docs"))
        for line in report.lines():  # "OK docs/3f9c...: 1 shards, 882 rows, ..." or BAD lines
            print(line)
        ```
    """

    cache: str
    """name/fingerprint."""
    shards: int
    """Shards checked."""
    rows: int
    """The manifest's rows."""
    bytes: int
    """The manifest's bytes."""
    seconds: float
    """Wall time of the check."""
    bad: dict[str, list[str]] = field(default_factory=dict)
    """Shard path relative to the cache folder (for a shard shared from another version's
    folder, `<name>/<fingerprint>/<path>`: raycache._upkeep.refs.label) -> what is wrong with
    it."""
    duplicate_keys: Duplicates = field(default_factory=Duplicates)
    """Keys held by more than one kept row: how many, and a few with their shards."""
    stray: dict[str, int] = field(default_factory=dict)
    """Files in the cache folder (outside runs/) that the manifest does not name -> bytes.
    Harmless to reads, so not a failure; gc removes them. Files other versions read (format
    5 shares) are not strays."""
    shared: dict[str, str] = field(default_factory=dict)
    """The bad shards shared from another version's folder -> that version (name/fingerprint).
    """
    skipped: list[SkippedRow] = field(default_factory=list)
    """Source rows the fill left out (on_bad_rows: skip): not a failure (the manifest accounts
    for them), reported; the next fill retries them."""

    @property
    def ok(self) -> bool:
        """No bad shard and no duplicate key (stray files and skipped rows do not count)."""
        return not self.bad and not self.duplicate_keys.count

    def lines(self) -> list[str]:
        """The report as `raycache verify` prints it.

        Returns:
            One line per bad shard and one for duplicate keys, or a one-line summary when OK;
            a line for stray files and one for skipped rows either way.
        """
        if self.ok:
            out = [f"OK {self.cache}: {self.shards} shards, {self.rows} rows, "
                   f"{human_bytes(self.bytes)} checked in {self.seconds:.1f} s"]
        else:
            out = [f"BAD {path}: {'; '.join(reasons)}" for path, reasons in self.bad.items()]
        dup = self.duplicate_keys
        if dup.count:
            shown = ", ".join(f"{k!r} in {' and '.join(v)}" for k, v in dup.examples.items())
            out.append(f"DUPLICATE KEYS: {dup.count} keys appear more than once, e.g. {shown}")
        if self.skipped:
            shown = "; ".join(f"{s.key!r} (row {s.row} of {s.source}): {s.reason}"
                              for s in self.skipped[:3]) + ("; ..." if len(self.skipped) > 3
                                                            else "")
            out.append(f"SKIPPED: {len(self.skipped)} source row(s) the fill could not cache "
                       f"(on_bad_rows: skip), e.g. {shown}. The next fill of this cache "
                       "retries them")
        if self.stray:
            shown = ", ".join(list(self.stray)[:3]) + (", ..." if len(self.stray) > 3 else "")
            out.append(f"STRAY: {len(self.stray)} file(s), "
                       f"{human_bytes(sum(self.stray.values()))}, that the manifest does not "
                       f"name ({shown}); reads ignore them, `raycache gc --delete` removes them")
        return out


def _encoder_problems(schema: pa.Schema, manifest: Manifest) -> list[str]:
    """Each encoder's column must be a fixed-size list of the manifest's dim and dtype (packed
    or, written before packing, as it is)."""
    out = []
    for e in manifest.encoders:
        value = pa.from_numpy_dtype(np.dtype(e.dtype))
        field = schema.field(e.name) if schema.get_field_index(e.name) >= 0 else None
        got = None if field is None else unpacked_type(field) if is_packed(field) else field.type
        if not (got is not None and pa.types.is_fixed_size_list(got)
                and got.list_size == e.dim and got.value_type == value):
            out.append(f"column {e.name!r} is {got or 'missing'}, expected a fixed-size list "
                       f"of {e.dim} {e.dtype}")
    return out


def _check(store: Store, cache_dir: str, manifest: Manifest, entry: ShardEntry
           ) -> tuple[list[str], pa.Array | None]:
    """One shard's problems, and the keys of the rows the version keeps (None where they
    cannot be read)."""
    path = file_path(store, cache_dir, entry)
    try:
        blob = store.read_bytes(path)
    except FileNotFoundError:
        if is_shared(entry):
            return [f"missing (shared from version {folder_of(entry)}, removed?): "
                    f"{store.url(path)}"], None
        return ["missing"], None
    except StoreUnavailable:  # the store's service, not the shard: verify fails, run it again
        raise
    except Exception as exc:  # each filesystem raises its own types
        return [f"unreadable ({type(exc).__name__}: {exc})"], None
    problems = mismatch(blob, entry.bytes, entry.sha256)
    try:
        pf = pq.ParquetFile(pa.BufferReader(blob))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... on bad footers
        return [*problems, f"Parquet footer unreadable ({exc})"], None
    if pf.metadata.num_rows != entry.file_rows:
        problems.append(f"{pf.metadata.num_rows} rows, the manifest says {entry.file_rows}")
    mask, why = selection_problems(entry)
    problems += why
    schema = pf.schema_arrow
    for column in (manifest.key_column, *manifest.label_columns):
        if schema.get_field_index(column) < 0:
            problems.append(f"no column {column!r}")
    problems += _encoder_problems(schema, manifest)
    keys = None
    if schema.get_field_index(manifest.key_column) >= 0:
        try:
            keys = pf.read(columns=[manifest.key_column]).column(0).combine_chunks()
        except Exception as exc:  # a damaged page
            problems.append(f"key column unreadable ({exc})")
    if keys is not None and mask is not None:
        keys = keys.filter(pa.array(mask)) if len(keys) == len(mask) else None
    return problems, keys


def _duplicates(paths: list[str], keys: list[pa.Array | None]) -> Duplicates:
    present = [(p, k) for p, k in zip(paths, keys, strict=True) if k is not None and len(k)]
    if not present:
        return Duplicates()
    counts = pc.value_counts(pa.chunked_array([k for _, k in present]))
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).field("values")
    if not len(repeated):
        return Duplicates()
    sample = repeated.slice(0, EXAMPLES)
    examples: dict[Any, list[str]] = {k: [] for k in sample.to_pylist()}
    for path, k in present:
        for value in k.filter(pc.is_in(k, value_set=sample)).unique().to_pylist():
            examples[value].append(path)
    return Duplicates(len(repeated), examples)


def verify(cache: Cache, threads: int = THREADS) -> Report:
    """Check every shard of a committed cache against its manifest; read-only.

    Every shard, its own or shared from an older version's folder: present, size, sha256,
    Parquet footer, row count, row selection, schema (key, labels, each encoder's fixed-size
    list); and no key held twice among the rows it keeps. Also lists stray files
    (raycache._upkeep.strays). A shard list that cannot be read is reported as bad, not raised.

    Args:
        cache: The committed cache, from `open_cache` or `ls`.
        threads: Shards checked at once.

    Returns:
        The report: `ok`, the bad shards and why, duplicate keys, strays, skipped rows.

    Raises:
        StoreError: The store cannot be listed (StoreUnavailable: after its retries).

    Example:
        ```python
        report = raycache.verify(raycache.open_cache("docs"))
        report.ok, report.bad
        ```
    """
    from raycache._upkeep.strays import read_by_others, strays

    start = time.perf_counter()
    m = cache.manifest
    try:
        len(m.shards)
    except CorruptCache as exc:  # the shard list: no shard can be checked without it
        return Report(cache=f"{m.name}/{m.fingerprint}", shards=m.shard_count, rows=m.rows,
                      bytes=m.bytes, seconds=time.perf_counter() - start,
                      bad={m.shard_list.get("path", "shard list"): [str(exc)]})
    results = list(map_ordered(lambda e: _check(cache.store, cache.dir, m, e), m.shards,
                               threads))
    bad = {label(e): problems for e, (problems, _) in zip(m.shards, results, strict=True)
           if problems}
    shared = {label(e): folder_of(e) for e in m.shards if is_shared(e) and label(e) in bad}
    dup = _duplicates([label(e) for e in m.shards], [keys for _, keys in results])
    stray = {rel: size for rel, (size, _) in strays(cache, read_by_others(cache)).items()}
    return Report(cache=f"{m.name}/{m.fingerprint}", shards=len(m.shards), rows=m.rows,
                  bytes=m.bytes, seconds=time.perf_counter() - start, bad=bad,
                  duplicate_keys=dup, stray=stray, shared=shared, skipped=m.skipped)
