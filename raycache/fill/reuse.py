"""Reuse by content: a frozen encoder maps the same input to the same output, so a fill takes
every embedding the store already holds for the same encoder identity and input value."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from raycache.cache.columns import hash_column

if TYPE_CHECKING:
    from raycache.cache.manifest import Manifest
    from raycache.cache.records import ShardEntry
    from raycache.cache.store import Store
    from raycache.encoders.config import EncoderConfig

__all__ = ["Lookup", "Reuse", "encoder_identity", "input_hashes", "need_column"]

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
    text as UTF-8, bytes as they are, lists of numbers as float64, anything else as JSON."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        raw = [b"t:" + (v or "").encode() for v in values.to_pylist()]
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        raw = [b"b:" + (v or b"") for v in values.to_pylist()]
    elif (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            and (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)):
        raw = [b"n:" + np.asarray(v, np.float64).tobytes() for v in values.to_pylist()]
    else:
        raw = [b"j:" + json.dumps(v, sort_keys=True, default=str).encode()
               for v in values.to_pylist()]
    return pa.array([hashlib.sha256(r).digest() for r in raw], HASH)


@dataclass
class _Source:
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
    """Reusable embeddings for one encoder: an index from input hash to (shard, row)."""

    index: pa.Table
    """Columns hash (unique), src (into sources), row."""
    sources: list[_Source]
    dim: int


@dataclass
class Reuse:
    """Every reusable embedding in a store, per encoder of the fill; built on the driver, used by
    the prepare stage (in its own process under Ray), which reads only the shards it needs."""

    store: Store
    lookups: dict[str, Lookup]
    """Encoder name -> its lookup (encoders with nothing to reuse are left out)."""
    _shards: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict, repr=False)
    _bad: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def scan(cls, store: Store, encoders: list[EncoderConfig], described: dict[str, Any],
             manifests: list[Manifest], threads: int = 8) -> Reuse | None:
        """The lookups of every committed cache (format 3 and later) whose encoders share an
        identity and dtype with the fill's; None when there is nothing to reuse."""
        wanted = {e.name: (encoder_identity(described[e.name]), e.dtype) for e in encoders}
        jobs: dict[str, list[_Source]] = {name: [] for name in wanted}
        dims: dict[str, int] = {}
        for m in manifests:
            for entry in m.encoders:
                for name, (identity, dtype) in wanted.items():
                    if entry.identity == identity and entry.dtype == dtype:
                        cache_dir = store.cache_dir(m.name, m.fingerprint)
                        dims[name] = entry.dim
                        jobs[name] += [_Source(cache_dir, s.path, entry.name,
                                               hash_column(entry.input), s)
                                       for s in m.shards]
        lookups = {}
        with ThreadPoolExecutor(threads) as pool:
            for name, srcs in jobs.items():
                if not srcs:
                    continue
                hashes = list(pool.map(lambda s: _read_hashes(store, s), srcs))
                lookups[name] = _index(hashes, srcs, dims[name])
        return cls(store, lookups) if lookups else None

    def take(self, encoder: str, hashes: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
        """(embeddings, need): the reused embeddings of these rows (zeros where none) and a mask
        of the rows the encoder must still encode; None when it has nothing to reuse."""
        lookup = self.lookups.get(encoder)
        if lookup is None:
            return None
        need = np.ones(len(hashes), bool)
        out: np.ndarray | None = None
        rows = pa.table({"hash": hashes, "pos": pa.array(np.arange(len(hashes)))})
        hit = rows.join(lookup.index, "hash", join_type="inner")
        pos, src, row = (hit.column(c).to_numpy() for c in ("pos", "src", "row"))
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

    def _embeddings(self, src: _Source) -> np.ndarray | None:
        """One shard's embedding column, read whole and checked (None, with a warning, for a
        shard that fails the check); the last few kept, since consecutive batches of a source
        mostly hit the same shards."""
        from raycache.cache.reads import read_shard
        from raycache.errors import StoreError

        key = f"{src.cache_dir}/{src.path}#{src.column}"
        if key in self._bad:
            return None
        if key not in self._shards:
            try:
                col = read_shard(self.store, src.cache_dir, src.entry, [src.column]).column(0)
            except StoreError as exc:
                warnings.warn(f"not reusing embeddings from a bad shard: {exc}", stacklevel=2)
                self._bad.add(key)
                return None
            col = col.combine_chunks()
            self._shards[key] = col.flatten().to_numpy().reshape(len(col), col.type.list_size)
            while len(self._shards) > 4:
                self._shards.popitem(last=False)
        self._shards.move_to_end(key)
        return self._shards[key]


def _read_hashes(store: Store, src: _Source) -> pa.Array:
    """The input-hash column of one shard (a column read, not the whole shard)."""
    with store.fs.open(f"{src.cache_dir}/{src.path}", "rb") as f:
        return pq.read_table(f, columns=[src.hashes]).column(0).combine_chunks()


def _index(hashes: list[pa.Array], sources: list[_Source], dim: int) -> Lookup:
    """One row per distinct hash: the first shard and row that hold it."""
    table = pa.table({
        "hash": pa.concat_arrays(hashes) if hashes else pa.array([], HASH),
        "src": pa.array(np.concatenate([np.full(len(h), i, np.int32)
                                        for i, h in enumerate(hashes)])),
        "row": pa.array(np.concatenate([np.arange(len(h), dtype=np.int32) for h in hashes])),
    })
    first = pc.equal(pc.index_in(table.column("hash"), value_set=table.column("hash")),
                     pa.array(np.arange(len(table), dtype=np.int32)))
    return Lookup(table.filter(first), sources, dim)
