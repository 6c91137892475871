"""What the commit's key and label scan needs of one shard, made by its writer as it writes:
a 64-bit hash of each row's key, the null keys, the key and label columns' types and each
counted label's count per value. The commit merges these (raycache._fill.keys) and reads keys
again only from shards whose hashes collide, or that have no summary (written by another
version of raycache, or by a rewrite)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raycache._cache.records import ShardRecord
from raycache._cache.store import PROGRESS, Store

__all__ = ["SUFFIX", "KeySummary", "key_hashes", "read_summary", "summarize", "summary_path",
           "value_counts"]

SUFFIX = ".keys"
"""A summary's name: its shard's progress record's name with this in place of `.json`."""
WIDEST = 64
"""Keys of up to this many bytes are hashed by numpy in one pass; longer ones by sha256."""


@dataclass
class KeySummary:
    """One shard's keys and labels, summed up for the commit."""

    path: str
    """The shard (relative to its cache folder), and its checksum: a summary counts only for
    the very bytes it was made from."""
    sha256: str
    hashes: np.ndarray
    """A uint64 hash of each row's key, in row order (a null key's: 0)."""
    nulls: list[int] = field(default_factory=list)
    """The rows whose key is null."""
    types: dict[str, str] = field(default_factory=dict)
    """The key and label columns' Arrow types (none for a column of nulls only)."""
    counts: dict[str, dict[Any, int]] = field(default_factory=dict)
    """Each counted label column's count per value (None: nulls)."""

    def matches(self, record: ShardRecord) -> bool:
        """Whether this summary was made from the shard `record` names."""
        return (self.path, self.sha256) == (record.path, record.sha256)

    def to_bytes(self) -> bytes:
        """An Arrow IPC stream: the hashes, the rest as JSON in the schema's metadata."""
        meta = {"path": self.path, "sha256": self.sha256, "nulls": self.nulls,
                "types": self.types,
                "counts": {c: [[v, n] for v, n in counts.items()]
                           for c, counts in self.counts.items()}}
        table = pa.table({"hash": pa.array(self.hashes, pa.uint64())}).replace_schema_metadata(
            {"raycache.keys": json.dumps(meta)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def from_bytes(cls, blob: bytes) -> KeySummary:
        """The summary `to_bytes` wrote (ValueError where the bytes are not one)."""
        try:
            table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
            meta = json.loads(table.schema.metadata[b"raycache.keys"])
        except (pa.ArrowInvalid, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a key summary: {exc}") from exc
        return cls(meta["path"], meta["sha256"],
                   table.column("hash").to_numpy().astype(np.uint64, copy=False),
                   list(meta["nulls"]), dict(meta["types"]),
                   {c: {v: n for v, n in pairs} for c, pairs in meta["counts"].items()})


def summarize(table: pa.Table, key: str, labels: Sequence[str], path: str, sha256: str
              ) -> KeySummary:
    """The summary of a shard's rows `table` (its key and `labels` columns at least)."""
    keys = table.column(key)
    nulls = np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False)).tolist() \
        if keys.null_count else []
    types = {c: str(table.schema.field(c).type) for c in [key, *labels]
             if not pa.types.is_null(table.schema.field(c).type)}
    return KeySummary(path, sha256, key_hashes(keys), nulls, types,
                      {c: value_counts(table.column(c)) for c in labels})


def value_counts(values: pa.ChunkedArray | pa.Array) -> dict[Any, int]:
    """How often each value occurs (None: nulls)."""
    counted = pc.value_counts(values)
    return dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(),
                    strict=True))


def summary_path(cache_dir: str, rel: str) -> str:
    """Where the summary of shard `rel` is kept until the commit (beside its progress
    record)."""
    return f"{cache_dir}/{PROGRESS}/{rel.rsplit('/', 1)[1]}{SUFFIX}"


def read_summary(store: Store, cache_dir: str, record: ShardRecord) -> KeySummary | None:
    """The stored summary of the shard `record` names (a resumed fill's), or None where there
    is none or it is of other bytes."""
    from raycache._cache.store import shard_name

    base = shard_name(record.ranges) if record.ranges else record.path  # a rewrite's record
    try:
        summary = KeySummary.from_bytes(store.read_bytes(summary_path(cache_dir, base)))
    except (FileNotFoundError, ValueError, KeyError):
        return None
    return summary if summary.matches(record) else None


def key_hashes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A uint64 for each value, equal for equal values: integers as themselves, text and bytes
    by a splitmix64 mix of their 8-byte words and length (vectorised), anything else by the
    first 8 bytes of its sha256 (raycache._fill.reuse.input_hashes). Nulls: 0."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    t = array.type
    if pa.types.is_integer(t):
        wide = pa.uint64() if pa.types.is_unsigned_integer(t) else pa.int64()
        return pc.fill_null(array.cast(wide), 0).to_numpy().view(np.uint64).copy()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t):
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        flat = pc.fill_null(array, "" if text else b"").cast(pa.large_binary())
        _, offsets, data = flat.buffers()
        offs = np.frombuffer(offsets, np.int64)[flat.offset: flat.offset + len(flat) + 1]
        lengths = np.diff(offs)
        short = lengths <= WIDEST  # decided a value at a time: the same in every shard
        out = np.zeros(len(flat), np.uint64)
        out[short] = _mixed_words(np.frombuffer(data, np.uint8) if data is not None
                                  else np.zeros(0, np.uint8), offs[:-1][short], lengths[short])
        if not short.all():
            out[~short] = _sha_prefix(array.filter(pa.array(~short)))
        return _nulls_zero(out, array)
    return _nulls_zero(_sha_prefix(array), array)


def _sha_prefix(array: pa.Array) -> np.ndarray:
    """The first 8 bytes of each value's input hash (raycache._fill.reuse), as uint64."""
    from raycache._fill.reuse import input_hashes

    digests = input_hashes(array)
    raw = np.frombuffer(digests.buffers()[1], np.uint8, len(array) * 32, digests.offset * 32)
    return raw.reshape(-1, 32)[:, :8].copy().view("<u8").reshape(-1)


def _nulls_zero(hashes: np.ndarray, array: pa.Array) -> np.ndarray:
    if array.null_count:
        hashes[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return hashes


def _mixed_words(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """splitmix64 over each value's bytes (`lengths` from `starts` in `data`) as zero-padded
    8-byte words, seeded by its length."""
    padded = np.concatenate([data, np.zeros(8, np.uint8)])
    at_every_byte = np.ndarray((len(padded) - 7,), "<u8", padded, strides=(1,))  # unaligned
    h = _mix(lengths.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    for j in range(0, int(lengths.max(initial=0)), 8):  # the value's j-th 8 bytes, zero-padded
        left = np.clip(lengths - j, 0, 8).astype(np.uint64)
        word = at_every_byte[np.minimum(starts + j, len(padded) - 8)]
        mask = np.where(left == 8, np.uint64(0xFFFFFFFFFFFFFFFF),
                        (np.uint64(1) << (np.uint64(8) * np.minimum(left, np.uint64(7))))
                        - np.uint64(1))
        h = np.where(left > 0, _mix(h ^ (word & mask)), h)  # past a value's end: as it was
    return h


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
