"""A committed cache as users see it: find it, read its manifest, look at its rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from raycache._cache.manifest import Manifest
from raycache._cache.native import as_dtype, frame, pick_encoder, stacked, tensors
from raycache._cache.opened import ReadOnlyStore
from raycache._cache.outside import KEPT_ROWS, kept_rows, read_whole
from raycache._cache.reads import (
    THREADS,
    cache_label,
    kept_of,
    map_ordered,
    read_shard,
    read_unchecked,
    shard_path,
)
from raycache._cache.records import ShardEntry
from raycache._cache.store import Store
from raycache._cache.vectors import unpack

if TYPE_CHECKING:
    import pandas as pd
    import ray.data


@dataclass
class Cache:
    """A committed cache: its store, folder and manifest (from `open_cache` or `ls`).

    Example:
        ```python
        cache = raycache.open_cache("docs")
        cache.manifest.rows, cache.uri
        df = cache.to_pandas(limit=100)
        ```
    """

    store: ReadOnlyStore
    """The store that holds the cache (what users may read of it: its URI, paths, listings and
    files; raycache's functions that take a store take it too)."""
    manifest: Manifest
    """Its manifest: encoders, columns, rows and shards."""

    @property
    def name(self) -> str:
        """The cache's name (the fill config's `name`)."""
        return self.manifest.name

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the fill's inputs that names this version."""
        return self.manifest.fingerprint

    @property
    def dir(self) -> str:
        """The cache's folder, in the store's filesystem form (`<store>/<name>/<fingerprint>`)."""
        return self.store.cache_dir(self.name, self.fingerprint)

    @property
    def uri(self) -> str:
        """The cache's folder as a URI (a local path, or s3://...)."""
        return self.store.url(self.dir)

    def shard_paths(self) -> list[str]:
        """Shard paths in the store's filesystem form.

        Returns:
            One path per shard, in the manifest's order (a shard shared with an older version
            is in that version's folder).

        Example:
            ```python
            paths = raycache.open_cache("docs").shard_paths()
            ```
        """
        return [shard_path(self.store, self.dir, s) for s in self.manifest.shards]

    def shard_urls(self, in_part: str = "warn") -> list[str]:
        """URLs of the shard files this version reads whole, for readers outside raycache.

        A version that shares an older version's file in part (format 5: rows edited or
        removed since) reads only some of its rows: those files are not here, but in
        `kept_rows()` (and the Parquet at `kept_rows_url()`), one row per row it reads. These
        files read whole, plus the kept rows of those, are exactly the version's rows
        (docs/format.md, "Reading a cache by hand"); `raycache.export` writes them as one file.

        Args:
            in_part: Where the version reads some files in part, so that these files alone
                are not all its rows: "warn" (a KeptRowsWarning naming how many rows they
                miss), "raise" (a RaycacheError), or "ignore" (you join the kept rows).

        Returns:
            One URL per shard file read whole, in the manifest's order.

        Raises:
            RaycacheError: `in_part="raise"` on a version that reads files in part, or an
                `in_part` that is none of the three.

        Example:
            ```python
            urls = raycache.open_cache("docs").shard_urls()
            ```
        """
        from raycache._errors import RaycacheError

        if in_part not in ("warn", "raise", "ignore"):
            raise RaycacheError(f"in_part={in_part!r}: expected warn, raise or ignore")
        whole = read_whole(self.manifest.shards)
        missed = self.manifest.rows - sum(e.rows for e in whole)
        if in_part != "ignore" and len(whole) < len(self.manifest.shards):
            message = (
                f"cache {cache_label(self.dir)} shares {len(self.manifest.shards) - len(whole)}"
                f" shard file(s) with an older version and reads only some of their rows: the "
                f"{len(whole)} file(s) shard_urls() gives hold {self.manifest.rows - missed} of "
                f"its {self.manifest.rows} rows. Join kept_rows() (or the Parquet at "
                "kept_rows_url()) for the other rows, or raycache.export(...) the version for "
                "exactly its rows in one file; shard_urls(in_part='ignore') takes the whole "
                "files alone knowingly")
            if in_part == "raise":
                raise RaycacheError(message)
            import warnings

            from raycache._errors import KeptRowsWarning

            warnings.warn(message, KeptRowsWarning, stacklevel=2)
        return [self.store.url(shard_path(self.store, self.dir, s)) for s in whole]

    def kept_rows(self) -> pa.Table:
        """The rows this version reads from the shard files it reads in part, for readers
        outside raycache: join them with the files' row numbers (DuckDB's
        `file_row_number`, Polars' `row_index`).

        Returns:
            A table of `file` (the file's URL) and `row` (0-based, in the file), one row per
            row the version reads from it; no rows where it reads every file whole.

        Raises:
            CorruptCache: The shard list cannot be read.
            CorruptShard: A row selection does not fit its file.

        Example:
            ```python
            kept = raycache.open_cache("docs").kept_rows()
            partial = sorted(set(kept.column("file").to_pylist()))
            ```
        """
        return kept_rows(self.name, self.fingerprint, self.manifest.shards,
                         self.store.url(self.store.root) + "/")

    def kept_rows_url(self) -> str | None:
        """The URL of this version's kept-rows list, a Parquet file of (`file`, `row`) with
        `file` relative to the store root (`<name>/<fingerprint>/shards/...`): the same rows
        as `kept_rows()`, for readers without raycache.

        Returns:
            Its URL; None where the version reads every file whole, or was committed by a
            raycache before 0.6 (use `kept_rows()`).

        Example:
            ```python
            url = raycache.open_cache("docs").kept_rows_url()
            ```
        """
        rec = self.manifest.extra.get(KEPT_ROWS)
        return self.store.url(f"{self.dir}/{rec['path']}") if isinstance(rec, dict) else None

    def iter_tables(self, columns: list[str] | None = None, verify: bool = True,
                    threads: int = THREADS) -> Iterator[pa.Table]:
        """Rows shard by shard, in order: exactly this version's rows, at most `threads` shards
        in memory at once.

        Args:
            columns: The columns to read (all of them when None).
            verify: Read each shard whole and check it against the manifest's size and sha256;
                False reads only `columns` from each shard, unchecked.
            threads: Shards read at once (and held, at most, before the caller takes them).

        Yields:
            One Arrow table per shard (the rows its version keeps); embeddings as fixed-size
            list columns.

        Raises:
            CorruptShard: A shard is missing or does not match the manifest (with `verify`).
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            rows = sum(t.num_rows for t in raycache.open_cache("docs").iter_tables(["id"]))
            ```
        """
        def read(entry: ShardEntry) -> pa.Table:
            if verify:
                return read_shard(self.store, self.dir, entry, columns)
            path, label = shard_path(self.store, self.dir, entry), f"{self.name}/{self.fingerprint}"
            table = read_unchecked(self.store, path, columns, label)
            return kept_of(self.store, path, label, table, entry.keep, entry.file_rows)

        return map_ordered(read, self.manifest.shards, threads)

    def read_table(self, columns: list[str] | None = None, limit: int | None = None,
                   verify: bool = True) -> pa.Table:
        """Rows as one Arrow table, reading shards in order until `limit` rows.

        Args:
            columns: The columns to read (all of them when None).
            limit: Stop after this many rows (all rows when None).
            verify: Read each shard whole and check it against the manifest's size and sha256;
                False reads only `columns` from each shard, unchecked.

        Returns:
            The rows, in shard order; embeddings as fixed-size list columns.

        Raises:
            CorruptShard: A shard is missing or does not match the manifest (with `verify`).
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            table = raycache.open_cache("docs").read_table(["id", "label"], limit=1000)
            ```
        """
        tables, n = [], 0
        reads = self.iter_tables(columns, verify, 1 if limit else THREADS)
        for t in reads:
            tables.append(t)
            n += t.num_rows
            if limit is not None and n >= limit:
                reads.close()
                break
        if not tables:
            return pa.table({})
        table = pa.concat_tables(tables, promote_options="default")  # shards of older writers
        return table if limit is None else table.slice(0, limit)

    def to_arrow(self, columns: list[str] | None = None, limit: int | None = None,
                 dtype: str | None = "float32", verify: bool = True) -> pa.Table:
        """Rows as one Arrow table whose vectors any Arrow reader takes as vectors.

        Args:
            columns: The columns to read (all of them when None).
            limit: Stop after this many rows (all rows when None).
            dtype: Vectors' number type: `FixedSizeList<dtype>[dim]` ("float32", what DuckDB
                reads as FLOAT[dim]; "float16", "float64"; None: as stored). No copy where
                the stored type is already `dtype`.
            verify: Check each shard against the manifest's size and sha256.

        Returns:
            The rows, in shard order.

        Raises:
            ConfigError: `dtype` is not a number type vectors are read in.

        Example:
            ```python
            table = raycache.open_cache("docs").to_arrow(["id", "minilm"])
            ```
        """
        return as_dtype(self.read_table(columns, limit, verify), dtype)

    def to_numpy(self, encoder: str | None = None, limit: int | None = None,
                 dtype: str | None = None, verify: bool = True) -> np.ndarray:
        """One encoder's embeddings as a 2-D array (rows, dim), in `read_table`'s row order.

        Args:
            encoder: The encoder (its column); None for a cache with one encoder.
            limit: Only the first this many rows (all rows when None).
            dtype: The array's number type (None: as stored).
            verify: Check each shard against the manifest's size and sha256.

        Returns:
            The embeddings: a read-only view of the decoded shard where one shard holds them
            (no copy), else one array that the shards are copied into as they are read.

        Raises:
            ConfigError: `encoder` is not one of the cache's (or the cache has several and
                none is named), or `dtype` is not a number type vectors are read in.

        Example:
            ```python
            x = raycache.open_cache("docs").to_numpy("minilm")  # x.shape: (rows, 384)
            ```
        """
        name = pick_encoder([e.name for e in self.manifest.encoders], encoder,
                            cache_label(self.dir))
        rows = self.manifest.rows if limit is None else min(limit, self.manifest.rows)
        dim = next(e.dim for e in self.manifest.encoders if e.name == name)
        many = len(self.manifest.shards) > 1
        return stacked(self.iter_tables([name], verify, 2 if many else 1), name, rows, dim,
                       dtype)

    def to_pandas(self, columns: list[str] | None = None, limit: int | None = None,
                  verify: bool = True, vectors: str = "rows") -> pd.DataFrame:
        """Rows as a pandas DataFrame.

        Args:
            columns: The columns to read (all of them when None).
            limit: Stop after this many rows (all rows when None).
            verify: Check each shard against the manifest's size and sha256.
            vectors: How an embedding column comes: "rows" (one numpy array per row, views
                of one 2-D block), "wide" (one float column per dimension, `<name>_<j>`:
                `df.filter(like="minilm_").to_numpy()` is 2-D) or "arrow" (pandas'
                ArrowDtype(fixed_size_list), no copy). For a 2-D array, `to_numpy`.

        Returns:
            The rows, in shard order.

        Raises:
            ConfigError: `vectors` is not one of those forms.
            CorruptShard: A shard is missing or does not match the manifest (with `verify`).
            StoreUnavailable: The store kept failing after its client's retries.

        Example:
            ```python
            df = raycache.open_cache("docs").to_pandas(limit=100, vectors="wide")
            ```
        """
        return frame(self.read_table(columns, limit, verify), vectors)

    def to_ray_dataset(self, columns: list[str] | None = None) -> ray.data.Dataset:
        """The shards as a Ray Dataset, streamed from the store (imports Ray).

        Args:
            columns: The columns to read (all of them when None).

        Returns:
            A lazy Ray Dataset over the cache's rows; shards are read when it is consumed.
            Embeddings are Arrow fixed_shape_tensor columns: a numpy batch holds each as one
            2-D array (rows, dim), a torch batch as one 2-D tensor.

        Example:
            ```python
            ds = raycache.open_cache("docs").to_ray_dataset(["id", "minilm"])
            ds.count()
            ```
        """
        import ray.data

        shards = list(self.manifest.shards)
        if not any(s.keep for s in shards):
            return ray.data.read_parquet(
                self.shard_paths(), filesystem=self.store.pyarrow_fs(), columns=columns
            ).map_batches(_as_tensors, batch_format="pyarrow", batch_size=None)
        # shards shared with a selection: each read by a task that keeps its selected rows
        items = [{"entry": json.dumps(s.to_json())} for s in shards]
        return ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            _read_entries, fn_kwargs=dict(store=self.store.for_workers(), cache_dir=self.dir,
                                          columns=columns),
            batch_format="pyarrow", batch_size=1)

    def __repr__(self) -> str:
        return f"Cache({self.manifest.summary()}, uri={self.uri!r})"

    def _repr_html_(self) -> str:
        m = self.manifest
        rows = "".join(
            f"<tr><td>{e.name}</td><td>{e.kind}</td><td>{e.input}</td><td>{e.dim}</td>"
            f"<td>{e.dtype}</td></tr>"
            for e in m.encoders
        )
        return (
            f"<b>raycache</b> {m.name}/{m.fingerprint} &mdash; {m.rows} rows, "
            f"{m.shard_count} shards, labels {m.label_columns}, at <code>{self.uri}</code>"
            f"<table><tr><th>encoder</th><th>kind</th><th>input</th><th>dim</th><th>dtype</th>"
            f"</tr>{rows}</table>"
        )


def _read_entries(batch: pa.Table, store: Store, cache_dir: str, columns: list[str] | None
                  ) -> pa.Table:
    """Ray Data task: the kept rows of the shards whose entries (JSON) come in."""
    entries = [ShardEntry.from_json(json.loads(t)) for t in batch.column("entry").to_pylist()]
    return tensors(pa.concat_tables([read_shard(store, cache_dir, e, columns) for e in entries],
                                    promote_options="default"))


def _as_tensors(batch: pa.Table) -> pa.Table:
    """Ray Data task: a block of shards' rows, its vectors unpacked, as tensor columns."""
    return tensors(unpack(batch))
