"""Reuse by content: a frozen encoder maps the same input to the same output, so a fill takes
every embedding the store already holds for the same encoder identity and input value."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache._cache.columns import hash_column
from raycache._cache.entry_rows import folder_path, whole_file
from raycache._core.caller import warn
from raycache._errors import DamagedCacheWarning, StoreError

if TYPE_CHECKING:
    from raycache._cache.manifest import Manifest
    from raycache._cache.records import ShardEntry
    from raycache._cache.store import Store
    from raycache._encoders.config import EncoderConfig

__all__ = ["Either", "Lookup", "Reuse", "Source", "encoder_identity", "input_hashes", "need_column"]

HASH = pa.binary(32)


def need_column(encoder: str) -> str:
    """Between stages: which rows an encoder still has to encode (the rest were reused)."""
    return f"__need_{encoder}"


def encoder_identity(described: dict[str, Any]) -> str:
    """What makes two encoders give the same output for the same input: everything in their
    description (kind, settings, weights and code digests, precision, storage dtype) but the
    name of the column they read."""
    same = {k: v for k, v in described.items() if k != "input"}
    return hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()[:24]


def input_hashes(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """sha256 of each value, of a canonical byte form that does not depend on the file format:
    text as UTF-8, bytes as they are, lists of numbers as float64, anything else as JSON.
    Text, bytes and lists of numbers are sliced from Arrow's flat buffers (one hashlib call a
    row, no Python objects per row). A null value has a null hash (its slot zeros): it is
    never hashed like `""`, so no lookup finds it and it is never reused."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        nulls = values.is_null().to_numpy(zero_copy_only=False)
        digests = np.frombuffer(_hashes(values).buffers()[1], np.uint8,
                                len(values) * 32).reshape(-1, 32).copy()
        digests[nulls] = 0
        return pa.Array.from_buffers(HASH, len(values), [
            pa.py_buffer(np.packbits(~nulls, bitorder="little")), pa.py_buffer(digests)],
            null_count=int(nulls.sum()))
    return _hashes(values)


def _hashes(values: pa.Array) -> pa.Array:
    """input_hashes of every value, a null hashed as its type's empty value."""
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        data, offsets = _flat_bytes(pc.fill_null(values, "").cast(pa.large_binary()))
        return _digests(b"t:", data, offsets)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        data, offsets = _flat_bytes(pc.fill_null(values, b"").cast(pa.large_binary()))
        return _digests(b"b:", data, offsets)
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)) \
            and values.null_count == 0 and values.flatten().null_count == 0:
        lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = values.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]) * 8
        return _digests(b"n:", memoryview(flat).cast("B"), offsets)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        raw = [b"n:" + np.asarray(v, np.float64).tobytes() for v in values.to_pylist()]
    else:
        raw = [b"j:" + json.dumps(v, sort_keys=True, default=str).encode()
               for v in values.to_pylist()]
    return pa.array([hashlib.sha256(r).digest() for r in raw], HASH)


def _flat_bytes(values: pa.Array) -> tuple[memoryview, np.ndarray]:
    """A large_binary array's data buffer and its n + 1 offsets into it."""
    _, offsets, data = values.buffers()
    offs = np.frombuffer(offsets, np.int64)[values.offset: values.offset + len(values) + 1]
    return memoryview(data if data is not None else b""), offs


def _digests(prefix: bytes, data: memoryview, offsets: np.ndarray) -> pa.Array:
    """sha256(prefix + data[offsets[i]:offsets[i + 1]]) for every i, as one binary(32) array."""
    sha = hashlib.sha256
    bounds = offsets.tolist()
    out = b"".join([sha(prefix + data[a:b]).digest()
                    for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    return pa.Array.from_buffers(HASH, len(bounds) - 1, [None, pa.py_buffer(out)])


@dataclass
class Source:
    """Where reusable embeddings of one encoder identity are: one shard of a committed cache."""

    cache_dir: str
    path: str
    column: str
    """The embedding column."""
    hashes: str
    """The input-hash column."""
    entry: ShardEntry


@dataclass
class Lookup:
    """Reusable embeddings for one encoder: the shards that hold them, and (built on first use,
    in the process that looks rows up) a sorted index from input hash to (shard, row)."""

    sources: list[Source]
    dim: int
    hashes: np.ndarray | None = None
    """Distinct input hashes, sorted, as fixed-width bytes (numpy S32)."""
    prefix: np.ndarray | None = None
    """Their first 8 bytes as big-endian uint64s (so in the same order): what a lookup
    binary-searches, integers being faster to compare than 32-byte strings; a hash found
    there is then compared whole."""
    src: np.ndarray | None = None
    """For each hash, the first shard (index into sources) that holds it."""
    row: np.ndarray | None = None
    """And its row in that shard."""

    def build(self, store: Store, threads: int = 8) -> None:
        """Read every source shard's input-hash column (a column read) and sort once: each
        lookup after is a binary search, O(rows looked up x log rows stored)."""
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda s: _read_hashes(store, s), self.sources))
        counts = [len(h) for h in parts]
        flat = (np.frombuffer(pa.concat_arrays(parts).buffers()[1], "S32", sum(counts))
                if parts and sum(counts) else np.empty(0, "S32"))
        src = np.repeat(np.arange(len(parts), dtype=np.int32), counts)
        row = np.concatenate([np.arange(n, dtype=np.int32) for n in counts]) if parts \
            else np.empty(0, np.int32)
        self.index(flat, src, row)

    def index(self, flat: np.ndarray, src: np.ndarray, row: np.ndarray) -> None:
        """Index hashes (S32) held at (source, row), sorted once; the first holder of a hash
        is the one found."""
        order = np.argsort(flat, kind="stable")  # stable: the first holder of a hash first
        flat, src, row = flat[order], src[order], row[order]
        first = np.ones(len(flat), bool)
        first[1:] = flat[1:] != flat[:-1]
        self.hashes, self.src, self.row = flat[first], src[first], row[first]
        self.prefix = _prefix(self.hashes)

    def find(self, hashes: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in `hashes` that the index holds, their shard, their row)."""
        assert self.hashes is not None and self.prefix is not None, "build() first"
        hashes = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
        query = np.frombuffer(hashes.buffers()[1], "S32", len(hashes) + hashes.offset
                              )[hashes.offset:]
        if not len(self.hashes):
            return (np.empty(0, np.int64),) * 3
        prefix = _prefix(query)
        at = np.searchsorted(self.prefix, prefix)
        at[at == len(self.hashes)] = 0
        shared = np.flatnonzero((self.prefix[at] == prefix) & (self.hashes[at] != query))
        if len(shared):  # another hash with the same first 8 bytes came first: search whole
            at[shared] = np.minimum(np.searchsorted(self.hashes, query[shared]),
                                    len(self.hashes) - 1)
        found = self.hashes[at] == query
        if hashes.null_count:  # a null input (its hash null) is never reused
            found &= hashes.is_valid().to_numpy(zero_copy_only=False)
        pos = np.flatnonzero(found)
        return pos, self.src[at[pos]], self.row[at[pos]]


def _prefix(hashes: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each S32 hash as a big-endian uint64 (sorts as the bytes do)."""
    words = np.ascontiguousarray(hashes).view(">u8").reshape(len(hashes), 4)
    return words[:, 0].astype(np.uint64)


@dataclass
class Reuse:
    """Every reusable embedding in a store, per encoder of the fill. The driver lists the source
    shards only (per-shard entries from the manifests); the process that looks rows up (the
    prepare stage, in its own process under Ray) builds each index once and reads only the
    embedding shards it needs."""

    store: Store
    lookups: dict[str, Lookup]
    """Encoder name -> its lookup (encoders with nothing to reuse are left out)."""
    _shards: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict, repr=False)
    _bad: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def scan(cls, store: Store, encoders: list[EncoderConfig], described: dict[str, Any],
             manifests: list[Manifest], leave: frozenset[tuple[str, str]] = frozenset()
             ) -> Reuse | None:
        """The shards of every committed cache (format 3 and later) whose encoders share an
        identity and dtype with the fill's, but those in `leave` ((folder, path): a version's
        base's, which it looks in apart); None when there is nothing to reuse."""
        wanted = {e.name: (encoder_identity(described[e.name]), e.dtype) for e in encoders}
        jobs: dict[str, list[Source]] = {name: [] for name in wanted}
        dims: dict[str, int] = {}
        for m in manifests:
            same = [(name, entry) for entry in m.encoders
                    for name, (identity, dtype) in wanted.items()
                    if entry.identity == identity and entry.dtype == dtype]
            try:
                shards = list(m.shards) if same else []
            except StoreError as exc:  # a damaged shard list: that cache is not reused
                warn(str(exc), DamagedCacheWarning)
                continue
            cache_dir = store.cache_dir(m.name, m.fingerprint)
            for name, entry in same:
                dims[name] = entry.dim
                jobs[name] += [Source(folder_path(store, cache_dir, s), s.path,
                                      entry.name, hash_column(entry.input), whole_file(s))
                               for s in shards]
        for name, srcs in jobs.items():  # versions share files: each file once
            jobs[name] = list({(s.cache_dir, s.path): s for s in srcs
                               if (s.cache_dir, s.path) not in leave}.values())
        lookups = {name: Lookup(srcs, dims[name]) for name, srcs in jobs.items() if srcs}
        return cls(store, lookups) if lookups else None

    def take(self, encoder: str, hashes: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
        """(embeddings, need): the reused embeddings of these rows (zeros where none) and a mask
        of the rows the encoder must still encode; None when it has nothing to reuse."""
        lookup = self.lookups.get(encoder)
        if lookup is None:
            return None
        if lookup.hashes is None:
            lookup.build(self.store)
        need = np.ones(len(hashes), bool)
        out: np.ndarray | None = None
        pos, src, row = lookup.find(hashes)
        for s in np.unique(src):
            emb = self._embeddings(lookup.sources[s])
            if emb is None:  # a bad shard: its rows are encoded instead
                continue
            sel = src == s
            if out is None:
                out = np.zeros((len(hashes), lookup.dim), emb.dtype)
            out[pos[sel]] = emb[row[sel]]
            need[pos[sel]] = False
        return (np.zeros((len(hashes), lookup.dim), np.float32) if out is None else out), need
    def _embeddings(self, src: Source) -> np.ndarray | None:
        """One shard's embedding column, read whole and checked (None, with a warning, for a
        shard that fails the check); the last few kept, since consecutive batches of a source
        mostly hit the same shards."""
        from raycache._cache.reads import read_shard

        key = f"{src.cache_dir}/{src.path}#{src.column}"
        if key in self._bad:
            return None
        if key not in self._shards:
            try:
                col = read_shard(self.store, src.cache_dir, src.entry, [src.column]).column(0)
            except StoreError as exc:
                warn(f"not reusing embeddings from a bad shard: {exc}")
                self._bad.add(key)
                return None
            col = col.combine_chunks()
            self._shards[key] = col.flatten().to_numpy().reshape(len(col), col.type.list_size)
            while len(self._shards) > 4:
                self._shards.popitem(last=False)
        self._shards.move_to_end(key)
        return self._shards[key]


@dataclass
class Either:
    """Reuse from `first`, then, for the rows it lacks, from what `then()` gives (called, and
    its index built, only when a row is looked up there)."""

    first: Reuse | None
    then: Callable[[], Reuse | None]
    _then: list[Reuse | None] = field(default_factory=list, repr=False)

    def second(self) -> Reuse | None:
        if not self._then:
            self._then.append(self.then())
        return self._then[0]

    def take(self, encoder: str, hashes: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
        """As Reuse.take."""
        found = self.first.take(encoder, hashes) if self.first else None
        if found is None:
            return self.second().take(encoder, hashes) if self.second() else None
        emb, need = found
        more = self.second().take(encoder, hashes.filter(pa.array(need))) \
            if need.any() and self.second() else None
        if more is not None:
            at = np.flatnonzero(need)[~more[1]]
            emb[at], need[at] = more[0][~more[1]], False
        return emb, need


def _read_hashes(store: Store, src: Source) -> pa.Array:
    """The input-hash column of one shard (a column read, not the whole shard); none, with a
    warning, where the shard is gone (removed by hand: its rows are encoded instead)."""
    try:
        with store.fs.open(f"{src.cache_dir}/{src.path}", "rb") as f:
            return pq.read_table(f, columns=[src.hashes]).column(0).combine_chunks()
    except FileNotFoundError:
        warn(f"not reusing embeddings from {store.url(f'{src.cache_dir}/{src.path}')}:"
             " the shard is missing", DamagedCacheWarning)
        return pa.array([], HASH)
