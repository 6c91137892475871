"""`raycache.export`: one version of a cache, exactly its rows (and a trained head's vectors of
them), to Parquet, Lance or Qdrant."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache
from raycache._cache.config import StoreConfig
from raycache._cache.finding import open_cache
from raycache._cache.manifest import Manifest, human_bytes
from raycache._cache.manifests import read_manifest
from raycache._errors import CacheNotFound, ConfigError, CorruptCache, CorruptShard, StoreError
from raycache._export import EXPORTERS
from raycache._export.rows import rows_of

if TYPE_CHECKING:
    from raycache._heads.head import Head

__all__ = ["ExportResult", "export"]


@dataclass(frozen=True)
class ExportResult:
    """What `export` wrote.

    Example:
        ```python
        done = raycache.export("docs", "docs.parquet", overwrite=True)
        print(done.summary())
        ```
    """

    cache: str
    """The version exported, "name/fingerprint"."""
    format: str
    """The format written (a key of EXPORTERS: parquet, lance, qdrant)."""
    to: str
    """Where: the file or dataset URI, "-" for a stream, or the Qdrant collection."""
    rows: int
    """Rows written: the version's rows, every one."""
    columns: tuple[str, ...]
    """The columns (payload fields and vectors for Qdrant): key, labels, vectors."""
    dims: dict[str, int]
    """Each exported encoder's vector size."""
    dtype: str
    """The vectors' number type."""
    bytes: int | None
    """The file's size (Parquet to a file), else None."""
    seconds: float
    """The whole call."""

    def summary(self) -> str:
        """One line: what went where, rows, size and speed.

        Returns:
            The line.
        """
        size = f", {human_bytes(self.bytes)}" if self.bytes is not None else ""
        vectors = ", ".join(f"{k}[{d}] {self.dtype}" for k, d in self.dims.items())
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (f"export {self.cache}: {self.rows} rows ({vectors}) to {self.format} "
                f"{self.to}{size} in {self.seconds:.2f} s ({rate:,.0f} rows/s)")

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values.

        Returns:
            A dict of every field.
        """
        return {**dataclasses.asdict(self), "columns": list(self.columns)}


def export(cache: Cache | str, to: Any, format: str = "parquet", *,
           store: StoreConfig | str | None = None, fingerprint: str | None = None,
           encoders: list[str] | None = None, dtype: str = "float32", overwrite: bool = False,
           collection: str | None = None, index: bool = False,
           options: dict[str, Any] | None = None, head: Head | str | None = None,
           layer: str = "output", head_column: str = "head",
           tensor: bool = False) -> ExportResult:
    """Write one version of a cache, exactly its rows, where other tools read vectors.

    Every shard is read and checked against its sha256, and only the rows the version keeps
    are written (a shared shard's kept rows, as `Cache.read_table` gives them), a few shards at
    a time: memory stays flat whatever the cache's size. A shard found missing or changed is
    damage only if the version's manifest is still the one the export began with: one that a
    compaction or repair rewrote meanwhile (gc then removing the shards it stopped reading) is
    exported again from its new manifest, once (a stream or a Lance dataset: an error that
    says so).

    Args:
        cache: A Cache, or a cache's name (its newest version, or `fingerprint`, in `store`).
        to: Where. parquet: a file path or fsspec URI (written under a temporary name beside
            it and moved into place last), or a binary stream (`sys.stdout.buffer`). lance: a
            dataset folder or URI. qdrant: a local folder (qdrant-client's local mode),
            ":memory:", an http(s) URL, or a QdrantClient.
        format: "parquet" (key, labels, FixedSizeList vectors: DuckDB's FLOAT[dim], Polars'
            Array), "lance" (needs pylance) or "qdrant" (needs qdrant-client; point ids are
            uuid5 of the key, the key and labels in the payload).
        store: The store, for a cache given by name: its URI or a StoreConfig (None:
            $RAYCACHE_STORE, else .raycache/store).
        fingerprint: The version, for a cache given by name (None: the newest).
        encoders: The encoders whose vectors are written (None: all).
        dtype: The vectors' number type: "float32", "float16" or "float64".
        overwrite: Replace an existing file, dataset or collection.
        collection: The Qdrant collection (None: the cache's name).
        index: Lance: build an IVF_PQ index on the first encoder's vectors (cosine).
        options: fsspec options of the target (storage_options for Lance; keyword arguments
            of QdrantClient, e.g. api_key).
        head: A trained head (a Head, or its checkpoint: `TrainResult.checkpoint`) whose
            vectors of each row are written too, as column `head_column`: a similarity head's
            embeddings, or a layer of a classifier's; made from the encoders' vectors the
            cache holds (the weights it was trained on), shard by shard. Only its column is
            written unless `encoders` names some.
        layer: The head's "output" (a similarity head's embeddings, a classifier's logits) or
            "penultimate" (the layers before the last Linear: an mlp's last hidden layer).
        head_column: The head's vectors' column (a named vector in Qdrant).
        tensor: Parquet: the vectors as Arrow's fixed_shape_tensor extension type, which Ray
            Data reads as one 2-D array per batch (`ray.data.read_parquet`); pyarrow, Polars
            and DuckDB read it too, Hugging Face datasets does not (leave it off for them).

    Returns:
        What was written, where, and how many rows.

    Raises:
        ConfigError: An unknown format or encoder, a bad dtype, a target that exists without
            `overwrite`, a bucket that does not exist (none is created), or the format's
            package is not installed; nothing is read then.
        CorruptShard: A shard does not match the version's manifest (`raycache repair`).
        CacheNotFound: The version was removed (gc) while it was exported.

    Example:
        ```python
        done = raycache.export("docs", "docs.parquet", overwrite=True)
        import duckdb
        duckdb.sql("select topic, minilm from 'docs.parquet' limit 1").fetchall()
        ```
    """
    started = time.perf_counter()
    if format not in EXPORTERS:
        raise ConfigError([f"format={format!r} is not an export format; expected one of "
                           f"{sorted(EXPORTERS)}"])
    if tensor and format != "parquet":
        raise ConfigError([f"tensor=True with format={format!r}: tensor columns are written "
                           "to Parquet only; export format parquet, or leave tensor off"])
    if isinstance(cache, str):
        name, _, fp = cache.partition("/")
        cache = open_cache(name, store, fingerprint or fp or None)
    if isinstance(head, str):
        from raycache._heads.loaded import load_head

        head = load_head(head)
    settings = {"collection": collection} if format == "qdrant" else (
        {"index": index} if format == "lance" else {})
    for again in (True, False):
        rows = rows_of(cache, encoders, dtype, head, layer, head_column, tensor)
        try:
            written = EXPORTERS[format].write(rows, to, dict(options or {}), overwrite,
                                              **settings)
            break
        except (CorruptShard, CorruptCache) as exc:
            cache = _read_again(cache, exc, again and _restartable(format, to), to)
    return ExportResult(cache=rows.label, format=format, to=written["to"], rows=written["rows"],
                        columns=tuple(rows.columns), dims=dict(rows.vectors), dtype=dtype,
                        bytes=written["bytes"], seconds=time.perf_counter() - started)


def _restartable(format: str, to: Any) -> bool:
    """Whether a failed export can be written again from the start: a Parquet file (its
    temporary file removed) or a Qdrant collection (removed), not a stream or a Lance
    dataset."""
    return format == "qdrant" or (format == "parquet" and isinstance(to, str))


def _read_again(cache: Cache, exc: StoreError, retry: bool, to: Any) -> Cache:
    """The version as its manifest now reads, after a shard read failed with `exc`: `exc`
    again where the manifest is as the export found it (the damage is real); the new one to
    export again from (`retry`), else an error that says it changed while it was exported."""
    label = f"{cache.name}/{cache.fingerprint}"
    now = read_manifest(cache.store, cache.dir)
    if now is None:
        raise CacheNotFound(
            f"cache {label} was removed (gc) while it was exported to {_where(to)}; what was "
            "written is not its rows: export a version that is there (`raycache ls`)") from exc
    if _same(now, cache.manifest):
        raise exc
    if not retry:
        raise StoreError(
            f"cache {label} was compacted or repaired while it was exported to {_where(to)} "
            f"(its manifest changed, and the shards it read before are gone: {exc.uri or exc}); "
            "its rows are intact. Run the export again") from exc
    return Cache(cache.store, now)


def _same(a: Manifest, b: Manifest) -> bool:
    """Whether two reads of a version's manifest are the same commit (a compaction or repair
    writes a new shard list, and a new `created`)."""
    return (a.created, a.shard_list, a.fill_seconds, a.totals) == (
        b.created, b.shard_list, b.fill_seconds, b.totals)


def _where(to: Any) -> str:
    return repr(to) if isinstance(to, str) else "a stream" if hasattr(to, "write") else str(to)
